package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"
)

func scratchData(n int) map[string]any {
	data := testData(nil)
	caps, grants := map[string]any{}, map[string]any{}
	for i := range n {
		biome := fmt.Sprintf("b%d", i%20)
		ref := fmt.Sprintf("%s:page%d.read@1", biome, i)
		caps[ref] = map[string]any{
			"biome": map[string]any{"id": biome, "version": "1.0.0"}, "lifecycle": "published",
			"riskTier": "low", "effectClass": "read", "outputClassification": "internal",
			"requiresApproval": false, "safeForAgents": true, "humanBaseline": nil,
			"requiredBindings": []any{}, "instanceGrade": nil,
		}
		grants[ref] = map[string]any{biome: map[string]any{"acme": map[string]any{
			"grantId": "g_" + ref, "org": "acme", "biomeVersion": "1.0.0",
			"profile": "read-only-assistant", "environments": map[string]any{"project": true},
			"subjects":  map[string]any{fmt.Sprintf("agent:a%d", i%20): true},
			"resources": []any{"*"}, "requiresApproval": false, "audience": map[string]any{"internal": true},
		}}}
	}
	data["capabilities"], data["grants"] = caps, grants
	return data
}

func TestScratchDump(t *testing.T) {
	if os.Getenv("SCRATCH_DUMP") == "" {
		t.Skip()
	}
	d := withIndex(t, scratchData(10000))
	raw, _ := json.Marshal(map[string]any{"xema": d})
	os.WriteFile("/tmp/sg/data10k.json", raw, 0o644)
	in := agentCall("")
	in.Subject.Ref, in.Groups, in.Roles, in.Resource = "agent:a0", nil, nil, ""
	raw, _ = json.Marshal(in)
	os.WriteFile("/tmp/sg/input.json", raw, 0o644)
}

func TestScratchTime(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	ctx := context.Background()
	for _, n := range []int{10000, 100000} {
		e, err := New(ctx, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Load(ctx, withIndex(t, scratchData(n)), "bench"); err != nil {
			t.Fatal(err)
		}
		in := agentCall("")
		in.Subject.Ref, in.Groups, in.Roles = "agent:a0", nil, nil
		var best time.Duration = 1 << 62
		var s SearchSets
		for range 30 {
			start := time.Now()
			s, err = e.Searchable(ctx, in)
			if d := time.Since(start); d < best {
				best = d
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("n=%d cut=%d clean=%d best=%v", n, len(s.Cut), len(s.Clean), best)
	}
}
