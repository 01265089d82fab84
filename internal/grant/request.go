package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/xemahq/xema/internal/strictjson"
)

// Request is the body of POST /v1/grants: an org admin approving one biome version's digest.
type Request struct {
	BiomeID    string `json:"biomeId"`
	Version    string `json:"version"`
	DigestHash string `json:"digestHash"`
	// Profile defaults to the biome's defaultProfile.
	Profile   string                   `json:"profile,omitempty"`
	Customize map[string]Customization `json:"customize,omitempty"`
}

// Customization overrides the profile for one required capability. A field left out keeps
// the profile's default; naming a capability at all grants it even where the profile would
// not (the admin named it on purpose).
type Customization struct {
	Environments     []string `json:"environments,omitempty"` // environment names
	Subjects         []string `json:"subjects,omitempty"`     // agent:x group:g role:r user:u workflow:w service:s
	Resources        []string `json:"resources,omitempty"`    // globs, OPA glob.match semantics
	Audience         []string `json:"audience,omitempty"`     // output classifications
	RateLimit        *Limit   `json:"rateLimit,omitempty"`
	Quota            *Limit   `json:"quota,omitempty"`
	RequiresApproval *bool    `json:"requiresApproval,omitempty"`
}

// Limit is a number of requests per time window, e.g. {60, "1m"}.
type Limit struct {
	Requests int    `json:"requests"`
	Per      string `json:"per"`
}

// Bounds of a Limit: beyond them a value is a typo, not a policy.
const (
	maxRateRequests  = 100_000
	maxQuotaRequests = 1_000_000_000
	minPer           = time.Second
	maxPer           = 366 * 24 * time.Hour
)

// check returns the first bad field of l, its path relative to the limit object.
func (l Limit) check(maxRequests int) *FieldError {
	if l.Requests < 1 || l.Requests > maxRequests {
		return invalid("/requests", CodeInvalidLimit, fmt.Sprintf("must be between 1 and %d, got %d", maxRequests, l.Requests))
	}
	d, err := time.ParseDuration(l.Per)
	if err != nil {
		return invalid("/per", CodeInvalidDuration, fmt.Sprintf("%q is not a duration such as \"1m\" or \"24h\"", l.Per))
	}
	if d < minPer || d > maxPer {
		return invalid("/per", CodeInvalidDuration, fmt.Sprintf("%q must be between %s and %s", l.Per, minPer, maxPer))
	}
	return nil
}

// DecodeRequest parses a grant request strictly: unknown fields, wrong types, missing
// required fields and trailing data are errors naming their JSON pointer. It checks shape
// only; Validate checks the request against the biome, environments and profiles.
func DecodeRequest(data []byte) (Request, error) {
	var req Request
	obj, fe := object(data, "")
	if fe != nil {
		return Request{}, Errors{fe}
	}
	errs := members(obj, "", map[string]member{
		"biomeId":    strMember(&req.BiomeID),
		"version":    strMember(&req.Version),
		"digestHash": strMember(&req.DigestHash),
		"profile":    strMember(&req.Profile),
		"customize": func(raw json.RawMessage, path string) (errs Errors) {
			req.Customize, errs = decodeCustomize(raw, path)
			return errs
		},
	})
	for _, name := range []string{"biomeId", "version", "digestHash"} {
		if raw, ok := obj[name]; !ok || isNull(raw) || string(raw) == `""` {
			errs = append(errs, invalid(strictjson.Pointer("", name), CodeMissingField, "required"))
		}
	}
	if err := errs.err(); err != nil {
		return Request{}, err
	}
	return req, nil
}

// DecodeCustomize parses a stored grant's customize object with the same strict rules.
func DecodeCustomize(data []byte) (map[string]Customization, error) {
	if len(data) == 0 {
		return nil, nil
	}
	c, errs := decodeCustomize(data, "/customize")
	if err := errs.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeCustomize(data []byte, path string) (map[string]Customization, Errors) {
	if isNull(data) {
		return nil, nil
	}
	obj, fe := object(data, path)
	if fe != nil {
		return nil, Errors{fe}
	}
	var errs Errors
	out := make(map[string]Customization, len(obj))
	for _, ref := range sortedKeys(obj) {
		c, cerrs := decodeCustomization(obj[ref], strictjson.Pointer(path, ref))
		out[ref] = c
		errs = append(errs, cerrs...)
	}
	return out, errs
}

func decodeCustomization(data []byte, path string) (Customization, Errors) {
	var c Customization
	obj, fe := object(data, path)
	if fe != nil {
		return c, Errors{fe}
	}
	errs := members(obj, path, map[string]member{
		"environments": strListMember(&c.Environments),
		"subjects":     strListMember(&c.Subjects),
		"resources":    strListMember(&c.Resources),
		"audience":     strListMember(&c.Audience),
		"rateLimit":    limitMember(&c.RateLimit),
		"quota":        limitMember(&c.Quota),
		"requiresApproval": func(raw json.RawMessage, path string) Errors {
			if isNull(raw) {
				return nil
			}
			c.RequiresApproval = new(bool)
			return appendErr(nil, typed(raw, path, c.RequiresApproval, "a boolean"))
		},
	})
	return c, errs
}

func decodeLimit(data []byte, path string) (*Limit, *FieldError) {
	if isNull(data) {
		return nil, nil
	}
	obj, fe := object(data, path)
	if fe != nil {
		return nil, fe
	}
	var l Limit
	errs := members(obj, path, map[string]member{
		"requests": func(raw json.RawMessage, path string) Errors {
			return appendErr(nil, typed(raw, path, &l.Requests, "an integer"))
		},
		"per": strMember(&l.Per),
	})
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return &l, nil
}

// member decodes one member of a JSON object, found at path.
type member func(raw json.RawMessage, path string) Errors

// members decodes obj's members in key order, each with its decoder, and keeps every error;
// a key without a decoder is an unknown field.
func members(obj map[string]json.RawMessage, path string, decoders map[string]member) Errors {
	var errs Errors
	for _, key := range sortedKeys(obj) {
		p := strictjson.Pointer(path, key)
		decode, ok := decoders[key]
		if !ok {
			errs = append(errs, invalid(p, CodeUnknownField, "unknown field"))
			continue
		}
		errs = append(errs, decode(obj[key], p)...)
	}
	return errs
}

func strMember(dst *string) member {
	return func(raw json.RawMessage, path string) Errors { return appendErr(nil, str(raw, path, dst)) }
}

func strListMember(dst *[]string) member {
	return func(raw json.RawMessage, path string) Errors { return appendErr(nil, strList(raw, path, dst)) }
}

func limitMember(dst **Limit) member {
	return func(raw json.RawMessage, path string) Errors {
		l, fe := decodeLimit(raw, path)
		*dst = l
		return appendErr(nil, fe)
	}
}

// object decodes one JSON object into its members, rejecting anything else and any
// trailing data after it.
func object(data []byte, path string) (map[string]json.RawMessage, *FieldError) {
	var obj map[string]json.RawMessage
	if fe := typed(data, path, &obj, "an object"); fe != nil {
		return nil, fe
	}
	if obj == nil {
		return nil, invalid(path, CodeInvalidType, "must be an object, got null")
	}
	return obj, nil
}

func str(data []byte, path string, dst *string) *FieldError {
	return typed(data, path, dst, "a string")
}

// strList decodes an array of strings; an empty array is refused because it would mean
// "nowhere"/"nobody", which an admin expresses by not granting, and leaving the field out
// means the profile's default.
func strList(data []byte, path string, dst *[]string) *FieldError {
	if isNull(data) {
		return nil
	}
	var items []json.RawMessage
	if fe := typed(data, path, &items, "an array"); fe != nil {
		return fe
	}
	if len(items) == 0 {
		return invalid(path, CodeInvalidValue, "must not be empty; leave the field out to keep the profile's default")
	}
	out := make([]string, len(items))
	for i, item := range items {
		p := strictjson.Pointer(path, fmt.Sprint(i))
		if isNull(item) {
			return invalid(p, CodeInvalidType, "must be a string, got null")
		}
		if fe := str(item, p, &out[i]); fe != nil {
			return fe
		}
	}
	*dst = out
	return nil
}

// typed unmarshals one JSON value into dst, reporting a type mismatch at path. dst is never
// a struct (objects decode into maps of raw members, checked key by key), so plain
// json.Unmarshal is strict enough: it also refuses trailing data.
func typed(data []byte, path string, dst any, want string) *FieldError {
	if err := json.Unmarshal(data, dst); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return invalid(path, CodeInvalidType, fmt.Sprintf("must be %s, got %s", want, te.Value))
		case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
			return invalid(path, CodeInvalidJSON, "not valid JSON: "+err.Error())
		default:
			return invalid(path, CodeInvalidType, fmt.Sprintf("must be %s: %v", want, err))
		}
	}
	return nil
}

// strictUnmarshal is json.Unmarshal that also refuses unknown struct fields and trailing data.
func strictUnmarshal(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func isNull(data []byte) bool {
	return string(bytes.TrimSpace(data)) == "null"
}

func sortedKeys(m map[string]json.RawMessage) []string {
	return slices.Sorted(maps.Keys(m))
}

func appendErr(errs Errors, fe *FieldError) Errors {
	if fe != nil {
		return append(errs, fe)
	}
	return errs
}
