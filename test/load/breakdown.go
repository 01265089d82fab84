package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// parts are where a call's CPU goes, each named by a function its samples pass through;
// a sample counts for the first part whose function is on its stack (the order nests:
// the decision and the provider call run inside request handling).
var parts = []struct{ name, fn string }{
	{"audit writer (the SQL of each batch, its commit)", "github.com/xemahq/xema/internal/audit.(*Log).write"},
	{"policy decision", "github.com/xemahq/xema/internal/gateway.(*Gateway).authorize"},
	{"input validation", "github.com/xemahq/xema/internal/gateway.(*Gateway).validate"},
	{"provider call (http runner, output check)", "github.com/xemahq/xema/internal/gateway.(*Gateway).run"},
	{"the rest of request handling (net/http, echo, authentication, the funnel's other steps)", "net/http.(*conn).serve"},
	{"HTTP client connections (read and write loops)", "net/http.(*persistConn)."},
	{"garbage collection (background marking)", "runtime.gcBgMarkWorker"},
}

// breakdown reads the CPU profile at path and returns, per part, its share of the samples
// and what that share is of cpuPerCall.
func breakdown(path string, cpuPerCall float64) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	at := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("cpu profile %s: no cpu samples", path)
	}
	sums := make([]int64, len(parts)+1) // the last: everything else
	var total int64
	for _, s := range p.Sample {
		v := s.Value[at]
		total += v
		sums[partOf(s)] += v
	}
	if total == 0 {
		return nil, fmt.Errorf("cpu profile %s: empty", path)
	}
	var rows []string
	for i, v := range sums {
		name := "other"
		if i < len(parts) {
			name = parts[i].name
		}
		share := float64(v) / float64(total)
		rows = append(rows, fmt.Sprintf("| %s | %.0f %% | %.0f µs |", name, 100*share, share*cpuPerCall))
	}
	return rows, nil
}

func partOf(s *profile.Sample) int {
	for i, part := range parts {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil && strings.HasPrefix(line.Function.Name, part.fn) {
					return i
				}
			}
		}
	}
	return len(parts)
}
