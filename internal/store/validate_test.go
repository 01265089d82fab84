package store

import (
	"errors"
	"strings"
	"testing"
)

// AuditRecord.Validate refuses what the store requires, naming the record and the field.
func TestAuditRecordValidate(t *testing.T) {
	ok := AuditRecord{ID: "inv_1", Decision: "allowed", Reasons: []byte(`[]`), PolicyInput: []byte(`{"a":1}`)}
	for _, tc := range []struct {
		name string
		edit func(r *AuditRecord)
		want string // in the error; "" for a valid record
	}{
		{"valid", func(*AuditRecord) {}, ""},
		{"documents absent", func(r *AuditRecord) { r.Reasons, r.PolicyInput = nil, nil }, ""},
		{"no id", func(r *AuditRecord) { r.ID = "" }, `audit record "": ID is required`},
		{"no decision", func(r *AuditRecord) { r.Decision = "" }, `audit record "inv_1": Decision is required`},
		{"detail not JSON", func(r *AuditRecord) { r.Detail = []byte(`{`) }, `audit record "inv_1": Detail is not valid JSON`},
		{"policy input not JSON", func(r *AuditRecord) { r.PolicyInput = []byte(`{"a":}`) }, `audit record "inv_1": PolicyInput is not valid JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}
