package grant

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/xemahq/xema/internal/fault"
)

func validRequest(hash string) Request {
	return Request{BiomeID: "demo", Version: "1.0.0", DigestHash: hash}
}

func TestValidate(t *testing.T) {
	bv := storedVersion(t, demoBiome("1.0.0"))
	req := validRequest(bv.DigestHash)
	req.Customize = map[string]Customization{"kb:page.write@1": {
		Environments: []string{"project", "app", "project"},
		Subjects:     []string{"user:alice@example.com", "agent:bot"},
		Resources:    []string{"kb/pages/**", "kb/{drafts,notes}/*"},
	}}
	got, err := Validate(req, &bv, DefaultEnvironments(), Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if got.Profile != "read-only-assistant" {
		t.Errorf("profile = %q, want the biome's defaultProfile", got.Profile)
	}
	c := got.Customize["kb:page.write@1"]
	if !reflect.DeepEqual(c.Environments, []string{"app", "project"}) || !reflect.DeepEqual(c.Subjects, []string{"agent:bot", "user:alice@example.com"}) {
		t.Errorf("lists not sorted and deduplicated: %+v", c)
	}
}

func TestValidateErrors(t *testing.T) {
	bv := storedVersion(t, demoBiome("1.0.0"))
	custom := func(c Customization) Request {
		r := validRequest(bv.DigestHash)
		r.Customize = map[string]Customization{"kb:page.read@1": c}
		return r
	}
	const p = "/customize/kb:page.read@1"
	tests := []struct {
		name string
		req  Request
		path string
		code string
		sent error
		kind fault.Kind
	}{
		{"unknown version", Request{BiomeID: "demo", Version: "9.9.9", DigestHash: bv.DigestHash}, "/version", CodeUnknownBiomeVersion, ErrUnknown, fault.Invalid},
		{"unknown biome", Request{BiomeID: "nope", Version: "1.0.0", DigestHash: bv.DigestHash}, "/version", CodeUnknownBiomeVersion, ErrUnknown, fault.Invalid},
		{"stale digest", validRequest("sha256:old"), "/digestHash", CodeStaleDigest, ErrConflict, fault.Conflict},
		{"unknown profile", func() Request { r := validRequest(bv.DigestHash); r.Profile = "superuser"; return r }(), "/profile", CodeUnknownProfile, ErrUnknown, fault.Invalid},
		{"capability not required", func() Request {
			r := validRequest(bv.DigestHash)
			r.Customize = map[string]Customization{"kb:page.delete@1": {}}
			return r
		}(), "/customize/kb:page.delete@1", CodeUnknownCapability, ErrUnknown, fault.Invalid},
		{"unknown environment", custom(Customization{Environments: []string{"project", "prod"}}), p + "/environments/1", CodeUnknownEnvironment, ErrUnknown, fault.Invalid},
		{"glob does not compile", custom(Customization{Resources: []string{"kb/[pages"}}), p + "/resources/0", CodeInvalidGlob, ErrInvalid, fault.Invalid},
		{"unclosed alternatives", custom(Customization{Resources: []string{"ok/*", "kb/{a,b"}}), p + "/resources/1", CodeInvalidGlob, ErrInvalid, fault.Invalid},
		{"empty glob", custom(Customization{Resources: []string{""}}), p + "/resources/0", CodeInvalidGlob, ErrInvalid, fault.Invalid},
		{"subject without kind", custom(Customization{Subjects: []string{"bot"}}), p + "/subjects/0", CodeInvalidSubject, ErrInvalid, fault.Invalid},
		{"subject of unknown kind", custom(Customization{Subjects: []string{"agent:a", "team:x"}}), p + "/subjects/1", CodeInvalidSubject, ErrInvalid, fault.Invalid},
		{"subject with empty name", custom(Customization{Subjects: []string{"user:"}}), p + "/subjects/0", CodeInvalidSubject, ErrInvalid, fault.Invalid},
		{"subject with a space", custom(Customization{Subjects: []string{"group:a b"}}), p + "/subjects/0", CodeInvalidSubject, ErrInvalid, fault.Invalid},
		{"unknown audience", custom(Customization{Audience: []string{"top-secret"}}), p + "/audience/0", CodeInvalidValue, ErrInvalid, fault.Invalid},
		{"zero rate", custom(Customization{RateLimit: &Limit{0, "1m"}}), p + "/rateLimit/requests", CodeInvalidLimit, ErrInvalid, fault.Invalid},
		{"negative quota", custom(Customization{Quota: &Limit{-5, "24h"}}), p + "/quota/requests", CodeInvalidLimit, ErrInvalid, fault.Invalid},
		{"absurd rate", custom(Customization{RateLimit: &Limit{maxRateRequests + 1, "1s"}}), p + "/rateLimit/requests", CodeInvalidLimit, ErrInvalid, fault.Invalid},
		{"per not a duration", custom(Customization{RateLimit: &Limit{10, "minute"}}), p + "/rateLimit/per", CodeInvalidDuration, ErrInvalid, fault.Invalid},
		{"per in days", custom(Customization{Quota: &Limit{10, "1d"}}), p + "/quota/per", CodeInvalidDuration, ErrInvalid, fault.Invalid},
		{"per too short", custom(Customization{RateLimit: &Limit{10, "10ms"}}), p + "/rateLimit/per", CodeInvalidDuration, ErrInvalid, fault.Invalid},
		{"per negative", custom(Customization{RateLimit: &Limit{10, "-1m"}}), p + "/rateLimit/per", CodeInvalidDuration, ErrInvalid, fault.Invalid},
		{"per too long", custom(Customization{Quota: &Limit{10, "9000h"}}), p + "/quota/per", CodeInvalidDuration, ErrInvalid, fault.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Validate(tt.req, &bv, DefaultEnvironments(), Builtin())
			if bv.ID != tt.req.BiomeID || bv.Version != tt.req.Version {
				// The gateway passes nil when the store has no such version; both must fail.
				if _, errNil := Validate(tt.req, nil, DefaultEnvironments(), Builtin()); errNil == nil {
					t.Error("nil biome version accepted")
				}
			}
			fe := firstFieldError(t, err)
			if fe.Path != tt.path || fe.Code != tt.code {
				t.Errorf("error %q: path %q code %s, want path %q code %s", err, fe.Path, fe.Code, tt.path, tt.code)
			}
			if !errors.Is(err, tt.sent) || fe.Kind() != tt.kind {
				t.Errorf("error %q: want %v of kind %v, got %v", err, tt.sent, tt.kind, fe.Kind())
			}
		})
	}
}

func TestValidateUnknownDefaultProfile(t *testing.T) {
	b := demoBiome("1.0.0")
	b.DefaultProfile = "gone"
	bv := storedVersion(t, b)
	_, err := Validate(validRequest(bv.DigestHash), &bv, DefaultEnvironments(), Builtin())
	fe := firstFieldError(t, err)
	if fe.Path != "/profile" || !strings.Contains(fe.Message, "defaultProfile") {
		t.Errorf("err = %v, want /profile naming the defaultProfile", err)
	}
}

func TestValidateStaleDigestHidesOtherErrors(t *testing.T) {
	bv := storedVersion(t, demoBiome("1.0.0"))
	req := validRequest("sha256:old")
	req.Profile = "nope"
	_, err := Validate(req, &bv, DefaultEnvironments(), Builtin())
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es.Kind() != fault.Conflict {
		t.Errorf("err = %v, want exactly the conflict", err)
	}
}

func TestNewGrant(t *testing.T) {
	bv := storedVersion(t, demoBiome("1.0.0"))
	req := validRequest(bv.DigestHash)
	req.Customize = map[string]Customization{"kb:page.read@1": {Subjects: []string{"agent:bot"}}}
	req, err := Validate(req, &bv, DefaultEnvironments(), Builtin())
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGrant(req, "user:admin", t0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.ID, "g_") || len(g.ID) != 2+24 {
		t.Errorf("id %q", g.ID)
	}
	if g.ApprovedBy != "user:admin" || !g.ApprovedAt.Equal(t0) || g.DigestHash != bv.DigestHash || g.Profile != "read-only-assistant" {
		t.Errorf("grant %+v", g)
	}
	back, err := DecodeCustomize(g.Customize)
	if err != nil || !reflect.DeepEqual(back, req.Customize) {
		t.Errorf("customize round trip = %+v, %v", back, err)
	}
	other, _ := NewGrant(req, "user:admin", t0)
	if other.ID == g.ID {
		t.Error("two grants share an id")
	}
	plain, _ := NewGrant(validRequest(bv.DigestHash), "user:admin", t0)
	if plain.Customize != nil {
		t.Errorf("customize = %s, want nil without customization", plain.Customize)
	}
}
