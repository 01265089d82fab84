package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/xemahq/xema/internal/capref"
	"github.com/xemahq/xema/internal/strictjson"
)

const (
	// BiomeFile is the manifest at the root of a biome directory.
	BiomeFile = "biome.json"
	// ContributionsDir holds one file per contributed capability.
	ContributionsDir = "contributions"
	// MaxFileSize bounds every file read from a biome directory.
	MaxFileSize = 4 << 20
)

// contributionName is the only file name allowed in contributions/.
var contributionName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*\.capability\.contribution\.json$`)

// File is one named document of a biome: biome.json or a contribution file.
type File struct {
	Name string // biome-relative, forward slashes; labels every Problem
	Data []byte
}

// LoadDir reads and validates the biome directory dir: biome.json and every
// contributions/*.capability.contribution.json. The Biome is nil unless problems is empty,
// so a biome is registered whole or not at all. err is only for a directory that cannot
// be read; every invalid or unreadable file inside it is a Problem.
func LoadDir(dir string) (*Biome, []Problem, error) {
	if _, err := os.ReadDir(dir); err != nil {
		return nil, nil, fmt.Errorf("read biome directory: %w", err)
	}
	var problems []Problem
	biome, err := readFile(filepath.Join(dir, BiomeFile))
	if err != nil {
		problems = append(problems, Problem{File: BiomeFile, Message: err.Error()})
	}
	var files []File
	entries, err := os.ReadDir(filepath.Join(dir, ContributionsDir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		problems = append(problems, Problem{File: ContributionsDir, Message: "cannot read directory: " + unwrapPath(err)})
	}
	for _, e := range entries {
		name := path.Join(ContributionsDir, e.Name())
		if e.IsDir() || !contributionName.MatchString(e.Name()) {
			problems = append(problems, Problem{File: name, Message: "unexpected entry: contributions/ holds only <slug>.capability.contribution.json files"})
			continue
		}
		data, err := readFile(filepath.Join(dir, ContributionsDir, e.Name()))
		if err != nil {
			problems = append(problems, Problem{File: name, Message: err.Error()})
			continue
		}
		files = append(files, File{Name: name, Data: data})
	}
	if biome == nil {
		return nil, sortProblems(problems), nil
	}
	b, more := Check(File{Name: BiomeFile, Data: biome}, files)
	problems = append(problems, more...)
	if len(problems) > 0 {
		return nil, sortProblems(problems), nil
	}
	return b, nil, nil
}

// readFile reads a regular file of at most MaxFileSize bytes; its errors are phrased for
// a Problem (the file is named there already).
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("missing")
		}
		return nil, fmt.Errorf("cannot read: %s", unwrapPath(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read: %s", unwrapPath(err))
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %s", unwrapPath(err))
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	return data, nil
}

// unwrapPath drops the absolute path from an *fs.PathError: Problems name files relative
// to the biome.
func unwrapPath(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ParseBiome parses and validates biome.json alone, inline contributions included. The
// Biome is nil unless problems is empty.
func ParseBiome(file string, data []byte) (*Biome, []Problem) {
	return Check(File{Name: file, Data: data}, nil)
}

// Check validates a whole biome from its documents: biome.json and the contribution files
// (LoadDir reads them from disk, the ingestion API from a request). Cross-document rules
// are checked too: permission hints match requiresCapabilities one to one, every
// contributed ref is required, no ref is contributed twice. Biome.Contributions holds the
// contribution files in the given order, then the inline entries. The Biome is nil unless
// problems is empty.
func Check(biome File, contributions []File) (*Biome, []Problem) {
	v, p := decodeJSON(biome.Name, biome.Data)
	if p != nil {
		// Contribution files are still checked, so one run lists every problem.
		problems := []Problem{*p}
		for _, f := range contributions {
			_, ps := ParseContribution(f.Name, f.Data)
			problems = append(problems, ps...)
		}
		return nil, sortProblems(problems)
	}
	problems := validate(builtin().biome, biome.Name, "", v)
	top, _ := v.(map[string]any)
	for i, r := range list(top["requiresCapabilities"]) {
		problems = append(problems, refProblem(biome.Name, strictjson.Pointer("/requiresCapabilities", strconv.Itoa(i)), r)...)
	}
	// Cross-document rules compare against requiresCapabilities only once it is well-formed,
	// so one typo is reported once, not again as every mismatch it causes.
	required, requiredOK := refs(top["requiresCapabilities"])
	problems = append(problems, hintProblems(biome.Name, required, requiredOK, top["permissionHints"])...)

	var seen []entry
	for _, f := range contributions {
		fv, p := decodeJSON(f.Name, f.Data)
		if p != nil {
			problems = append(problems, *p)
			continue
		}
		c, ps := checkContribution(f.Name, "", fv)
		problems = append(problems, ps...)
		seen = append(seen, entry{c: c, file: f.Name, ref: refOf(fv)})
	}
	for i, e := range inlineEntries(top) {
		prefix := strictjson.Pointer("/xema/contributions/inline", strconv.Itoa(i))
		// The biome schema already validated the entry against the contribution schema
		// (it $refs it), so only the checks beyond the schema run here.
		problems = append(problems, extraContributionChecks(biome.Name, prefix, e)...)
		var c Contribution
		if !hasProblemUnder(problems, biome.Name, prefix) {
			var p *Problem
			if c, p = typed(biome.Name, prefix, e); p != nil {
				problems = append(problems, *p)
			}
		}
		seen = append(seen, entry{c: c, file: biome.Name, prefix: prefix, ref: refOf(e)})
	}
	problems = append(problems, crossProblems(required, requiredOK, seen)...)
	if len(problems) > 0 {
		return nil, sortProblems(problems)
	}

	var b Biome
	delete(top, "$schema") // for editors only (the schema allows it): not part of the biome
	if p := decodeInto(biome.Name, "", v, &b); p != nil {
		return nil, []Problem{*p}
	}
	for _, f := range seen {
		b.Contributions = append(b.Contributions, f.c)
	}
	return &b, nil
}

// entry is one contribution seen while checking a biome, valid or not.
type entry struct {
	c            Contribution
	file, prefix string
	ref          any // manifest.ref as written, whatever its type
}

func (f entry) where() string {
	if f.prefix == "" {
		return f.file
	}
	return f.file + " at " + f.prefix
}

// crossProblems checks contributed refs against requiresCapabilities and each other.
func crossProblems(required []string, requiredOK bool, contributions []entry) []Problem {
	var out []Problem
	first := map[string]entry{}
	for _, f := range contributions {
		ref, ok := validRef(f.ref)
		if !ok {
			continue
		}
		path := strictjson.Pointer(f.prefix, "manifest", "ref")
		if requiredOK && !slices.Contains(required, ref) {
			out = append(out, Problem{File: f.file, Path: path, Message: ref + " is not in biome.json requiresCapabilities"})
		}
		if prev, dup := first[ref]; dup {
			out = append(out, Problem{File: f.file, Path: path, Message: "duplicate ref " + ref + ": also contributed by " + prev.where()})
			continue
		}
		first[ref] = f
	}
	return out
}

// hintProblems checks that permission hints and required capabilities match one to one.
func hintProblems(file string, required []string, requiredOK bool, hints any) []Problem {
	var out []Problem
	hinted := map[string]int{}
	hintsOK := hints != nil
	if _, isList := hints.([]any); !isList {
		hintsOK = false
	}
	for j, h := range list(hints) {
		hm, _ := h.(map[string]any)
		c, ok := validRef(hm["capability"])
		if !ok {
			hintsOK = false
			continue
		}
		path := strictjson.Pointer("/permissionHints", strconv.Itoa(j), "capability")
		if requiredOK && !slices.Contains(required, c) {
			out = append(out, Problem{File: file, Path: path, Message: c + " is not in requiresCapabilities"})
		}
		if k, dup := hinted[c]; dup {
			out = append(out, Problem{File: file, Path: path, Message: fmt.Sprintf("duplicate permission hint for %s (also /permissionHints/%d)", c, k)})
			continue
		}
		hinted[c] = j
	}
	if !hintsOK || !requiredOK {
		return out
	}
	for i, r := range required {
		if _, ok := hinted[r]; !ok {
			out = append(out, Problem{File: file, Path: strictjson.Pointer("/requiresCapabilities", strconv.Itoa(i)), Message: "no permissionHints entry for " + r})
		}
	}
	return out
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// refs returns v as a list of refs, and whether every entry is a valid ref.
func refs(v any) ([]string, bool) {
	l, ok := v.([]any)
	out := make([]string, 0, len(l))
	for _, r := range l {
		s, valid := validRef(r)
		ok = ok && valid
		out = append(out, s)
	}
	return out, ok
}

// validRef returns v as a string when it is a valid capability ref.
func validRef(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	if _, err := capref.Parse(s); err != nil {
		return "", false
	}
	return s, true
}

func inlineEntries(top map[string]any) []any {
	x, _ := top["xema"].(map[string]any)
	c, _ := x["contributions"].(map[string]any)
	list, _ := c["inline"].([]any)
	return list
}

func refOf(contribution any) any {
	top, _ := contribution.(map[string]any)
	m, _ := top["manifest"].(map[string]any)
	return m["ref"]
}

func hasProblemUnder(problems []Problem, file, prefix string) bool {
	for _, p := range problems {
		if p.File == file && (p.Path == prefix || strings.HasPrefix(p.Path, prefix+"/")) {
			return true
		}
	}
	return false
}
