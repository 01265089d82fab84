package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// parts are where a call's CPU goes, each named by functions its samples pass through;
// a sample counts for the first part with one of its functions on its stack (the order
// nests: the decision and the provider call run inside request handling).
var parts = []struct {
	name string
	fns  []string
}{
	{"audit writer (the SQL of each batch, its commit)", []string{"github.com/xemahq/xema/internal/audit.(*Log).write"}},
	// OPA's evaluation recurses deeper than the 64 frames a profile keeps of a stack: a
	// sample deep in it has lost authorize and every frame below, and only its OPA frames
	// say it is the decision's (the gateway runs OPA nowhere else under load).
	{"policy decision", []string{"github.com/xemahq/xema/internal/gateway.(*Gateway).authorize", "github.com/open-policy-agent/opa/"}},
	{"input validation", []string{"github.com/xemahq/xema/internal/gateway.(*Gateway).validate"}},
	{"provider call (http runner, output check)", []string{"github.com/xemahq/xema/internal/gateway.(*Gateway).run"}},
	{"the rest of request handling (net/http, echo, authentication, the funnel's other steps)", []string{"net/http.(*conn).serve"}},
	{"HTTP client connections (read and write loops)", []string{"net/http.(*persistConn)."}},
	{"garbage collection (background marking)", []string{"runtime.gcBgMarkWorker"}},
}

// breakdown reads the CPU profile at path and returns, per part, its share of the samples
// and what that share is of cpuPerCall: as table rows, and the µs a call of each part (in
// the order of parts, then the rest).
func breakdown(path string, cpuPerCall float64) ([]string, []float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	at := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			at = i
		}
	}
	if at < 0 {
		return nil, nil, fmt.Errorf("cpu profile %s: no cpu samples", path)
	}
	sums := make([]int64, len(parts)+1) // the last: everything else
	var total int64
	for _, s := range p.Sample {
		v := s.Value[at]
		total += v
		sums[partOf(s)] += v
	}
	if total == 0 {
		return nil, nil, fmt.Errorf("cpu profile %s: empty", path)
	}
	var rows []string
	perCall := make([]float64, len(sums))
	for i, v := range sums {
		name := "other"
		if i < len(parts) {
			name = parts[i].name
		}
		share := float64(v) / float64(total)
		perCall[i] = share * cpuPerCall
		rows = append(rows, fmt.Sprintf("| %s | %.0f %% | %.0f µs |", name, 100*share, perCall[i]))
	}
	return rows, perCall, nil
}

func partOf(s *profile.Sample) int {
	for i, part := range parts {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil && slices.ContainsFunc(part.fns, func(fn string) bool { return strings.HasPrefix(line.Function.Name, fn) }) {
					return i
				}
			}
		}
	}
	return len(parts)
}
