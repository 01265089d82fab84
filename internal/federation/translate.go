package federation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/xemahq/xema/internal/fault"
	"github.com/xemahq/xema/internal/inputschema"
	"github.com/xemahq/xema/internal/manifest"
)

// DefaultProfile is the profile a grant of a server's tools takes when the admin names none.
const DefaultProfile = "internal-agent"

// tool is one MCP tool translated to a contribution, with its pinned definition.
type tool struct {
	Name         string
	Ref          string
	Pin          string
	Contribution manifest.Contribution
}

// Pin is the hash of a tool's definition: sha256 over the canonical JSON (keys sorted, numbers
// as written) of its name, description and input schema.
func Pin(t *mcp.Tool) (string, error) {
	schema, err := decodeObject(t.InputSchema)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(map[string]any{"name": t.Name, "description": t.Description, "inputSchema": schema})
	if err != nil {
		return "", fmt.Errorf("pin %q: %w", t.Name, err)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// translate turns a tools/list answer into contributions for provider. The whole list is
// refused when any tool cannot be served: an unmappable name, two tools on one ref, an input
// schema that does not compile, a manifest that does not validate.
func translate(provider string, tools []*mcp.Tool) ([]tool, error) {
	byRef := map[string]string{}
	var out []tool
	var problems []inputschema.Violation
	for _, t := range tools {
		at := "/tools/" + t.Name
		ref, err := ToolRef(provider, t.Name)
		if err != nil {
			problems = append(problems, inputschema.Violation{Path: at, Message: err.Error()})
			continue
		}
		if other, ok := byRef[ref]; ok {
			return nil, fault.New(fault.Conflict, CodeToolCollision, "tools %q and %q both map to %s; nothing was registered", other, t.Name, ref)
		}
		byRef[ref] = t.Name
		tt, vs := translateTool(provider, ref, t)
		for _, v := range vs {
			v.Path = at + v.Path
			problems = append(problems, v)
		}
		if len(vs) == 0 {
			out = append(out, tt)
		}
	}
	if len(problems) > 0 {
		return nil, &fault.Error{Kind: fault.Unprocessable, Code: CodeInvalidTool,
			Message:    fmt.Sprintf("%d problem(s) in the server's tools (first: %s: %s); nothing was registered", len(problems), problems[0].Path, problems[0].Message),
			Violations: problems}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, nil
}

func translateTool(provider, ref string, t *mcp.Tool) (tool, []inputschema.Violation) {
	bad := func(path, format string, args ...any) (tool, []inputschema.Violation) {
		return tool{}, []inputschema.Violation{{Path: path, Message: fmt.Sprintf(format, args...)}}
	}
	in, err := decodeObject(t.InputSchema)
	if err != nil || in == nil {
		return bad("/inputSchema", "the input schema is not a JSON object")
	}
	if in, err = toDraft2020(in); err != nil {
		return bad("/inputSchema", "%v", err)
	}
	if _, err := inputschema.Compile(ref, in); err != nil {
		return bad("/inputSchema", "%v", err)
	}
	out := map[string]any{}
	if t.OutputSchema != nil {
		if out, err = decodeObject(t.OutputSchema); err != nil || out == nil {
			return bad("/outputSchema", "the output schema is not a JSON object")
		}
		if out, err = toDraft2020(out); err != nil {
			return bad("/outputSchema", "%v", err)
		}
	}
	pin, err := Pin(t)
	if err != nil {
		return bad("", "%v", err)
	}
	risk, effect, sideEffects := classify(t.Annotations)
	title := t.Title
	if title == "" && t.Annotations != nil {
		title = t.Annotations.Title
	}
	if title == "" {
		title = t.Name
	}
	summary := t.Description
	if summary == "" {
		summary = fmt.Sprintf("MCP tool %q of %s.", t.Name, provider)
	}
	m := manifest.Manifest{Ref: ref, Title: clip(title, 200), Summary: clip(summary, 1000), SideEffects: sideEffects,
		InputSchema: in, OutputSchema: out, RiskTier: risk, EffectClass: effect, RequiresApproval: false,
		ExternalServiceRef: "mcp:" + provider, Reach: "integration", OutputClassification: "internal"}
	c := manifest.Contribution{Kind: "capability", Manifest: m}
	raw, err := json.Marshal(c)
	if err != nil {
		return bad("", "encode: %v", err)
	}
	if _, problems := manifest.ValidateContribution(ref, raw); len(problems) > 0 {
		vs := make([]inputschema.Violation, len(problems))
		for i, p := range problems {
			vs[i] = inputschema.Violation{Path: p.Path, Message: p.Message}
		}
		return tool{}, vs
	}
	return tool{Name: t.Name, Ref: ref, Pin: pin, Contribution: c}, nil
}

// classify reads the tool's annotations: readOnlyHint → low/read; destructiveHint → high/write;
// anything else → medium/write. Hints are the server's claims; a grant still decides.
func classify(a *mcp.ToolAnnotations) (risk, effect, sideEffects string) {
	switch {
	case a != nil && a.ReadOnlyHint:
		return "low", "read", "none: the server declares the tool read-only"
	case a != nil && a.DestructiveHint != nil && *a.DestructiveHint:
		return "high", "write", "may destroy or overwrite data on the external server (the server declares the tool destructive)"
	default:
		return "medium", "write", "may change state on the external server"
	}
}

// decodeObject re-reads a schema the SDK decoded as it liked into JSON with numbers kept as
// written; nil for a missing schema.
func decodeObject(v any) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
