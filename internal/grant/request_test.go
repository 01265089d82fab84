package grant

import (
	"errors"
	"reflect"
	"testing"

	"github.com/xemahq/xema/internal/fault"
)

func TestDecodeRequest(t *testing.T) {
	data := `{"biomeId":"demo","version":"1.0.0","digestHash":"sha256:ab","profile":"internal-agent",
	  "customize":{"kb:page.read@1":{"environments":["project"],"subjects":["agent:bot","group:support"],
	  "resources":["kb/pages/*"],"audience":["internal"],"rateLimit":{"requests":10,"per":"1m"},
	  "quota":{"requests":100,"per":"24h"},"requiresApproval":true}}}`
	got, err := DecodeRequest([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := Request{BiomeID: "demo", Version: "1.0.0", DigestHash: "sha256:ab", Profile: "internal-agent",
		Customize: map[string]Customization{"kb:page.read@1": {
			Environments: []string{"project"}, Subjects: []string{"agent:bot", "group:support"},
			Resources: []string{"kb/pages/*"}, Audience: []string{"internal"},
			RateLimit: &Limit{10, "1m"}, Quota: &Limit{100, "24h"}, RequiresApproval: boolp(true),
		}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	const head = `"biomeId":"demo","version":"1.0.0","digestHash":"h"`
	tests := []struct {
		name, body, path, code string
	}{
		{"not JSON", `{"biomeId":`, "", CodeInvalidJSON},
		{"empty body", ``, "", CodeInvalidJSON},
		{"not an object", `[1]`, "", CodeInvalidType},
		{"null document", `null`, "", CodeInvalidType},
		{"trailing data", `{` + head + `} {}`, "", CodeInvalidJSON},
		{"empty biomeId", `{"biomeId":"","version":"1.0.0","digestHash":"h"}`, "/biomeId", CodeMissingField},
		{"unknown field", `{` + head + `,"profil":"x"}`, "/profil", CodeUnknownField},
		{"missing biomeId", `{"version":"1.0.0","digestHash":"h"}`, "/biomeId", CodeMissingField},
		{"missing digestHash", `{"biomeId":"demo","version":"1.0.0"}`, "/digestHash", CodeMissingField},
		{"version not a string", `{"biomeId":"demo","version":1,"digestHash":"h"}`, "/version", CodeInvalidType},
		{"customize not an object", `{` + head + `,"customize":[]}`, "/customize", CodeInvalidType},
		{"unknown customization field", `{` + head + `,"customize":{"kb:page.read@1":{"env":["project"]}}}`, "/customize/kb:page.read@1/env", CodeUnknownField},
		{"environments not an array", `{` + head + `,"customize":{"a:b@1":{"environments":"project"}}}`, "/customize/a:b@1/environments", CodeInvalidType},
		{"empty environments", `{` + head + `,"customize":{"a:b@1":{"environments":[]}}}`, "/customize/a:b@1/environments", CodeInvalidValue},
		{"subject not a string", `{` + head + `,"customize":{"a:b@1":{"subjects":["agent:x",7]}}}`, "/customize/a:b@1/subjects/1", CodeInvalidType},
		{"null in a list", `{` + head + `,"customize":{"a:b@1":{"resources":[null]}}}`, "/customize/a:b@1/resources/0", CodeInvalidType},
		{"fractional requests", `{` + head + `,"customize":{"a:b@1":{"rateLimit":{"requests":1.5,"per":"1m"}}}}`, "/customize/a:b@1/rateLimit/requests", CodeInvalidType},
		{"string requests", `{` + head + `,"customize":{"a:b@1":{"quota":{"requests":"5","per":"1m"}}}}`, "/customize/a:b@1/quota/requests", CodeInvalidType},
		{"unknown limit field", `{` + head + `,"customize":{"a:b@1":{"quota":{"requests":5,"every":"1m"}}}}`, "/customize/a:b@1/quota/every", CodeUnknownField},
		{"approval not a boolean", `{` + head + `,"customize":{"a:b@1":{"requiresApproval":"true"}}}`, "/customize/a:b@1/requiresApproval", CodeInvalidType},
		{"slash in a key is escaped", `{` + head + `,"customize":{"a/b~c":{"x":1}}}`, "/customize/a~1b~0c/x", CodeUnknownField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(tt.body))
			fe := firstFieldError(t, err)
			if fe.Path != tt.path || fe.Code != tt.code {
				t.Errorf("error %q: path %q code %s, want path %q code %s", err, fe.Path, fe.Code, tt.path, tt.code)
			}
			if !errors.Is(err, ErrInvalid) || fe.Kind() != fault.Invalid {
				t.Errorf("error %q: want ErrInvalid of kind invalid", err)
			}
		})
	}
}

func TestDecodeRequestReportsEveryBadField(t *testing.T) {
	_, err := DecodeRequest([]byte(`{"biomeId":1,"version":"v","digestHash":"h","x":1,"customize":{"a:b@1":{"y":2}}}`))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err %v is not Errors", err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	want := []string{"/biomeId", "/customize/a:b@1/y", "/x"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("paths = %v, want %v", paths, want)
	}
}

func firstFieldError(t *testing.T, err error) *FieldError {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *FieldError", err)
	}
	return fe
}
