package metatool

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"

	"github.com/xemahq/xema/internal/fault"
)

func (m *Tools) cursors() cursorSealer { return cursorSealer{key: m.d.CursorKey} }

// cursorSealer makes opaque pagination cursors bound to the query that produced them.
type cursorSealer struct{ key []byte }

type cursorBody struct {
	Offset int    `json:"o"`
	Query  string `json:"q"`
	// Pos is a keyset position (SealPosition); empty in search cursors.
	Pos string `json:"p,omitempty"`
}

func (s cursorSealer) seal(offset int, queryKey string) string {
	return s.sealBody(cursorBody{Offset: offset, Query: queryHash(queryKey)})
}

func (s cursorSealer) sealBody(b cursorBody) string {
	body, _ := json.Marshal(b)
	mac := hmac.New(sha256.New, s.key)
	mac.Write(body)
	return base64.RawURLEncoding.EncodeToString(append(mac.Sum(nil), body...))
}

func (s cursorSealer) open(cursor, queryKey string) (int, error) {
	if cursor == "" {
		return 0, nil
	}
	body, err := s.openBody(cursor, queryKey)
	if err != nil {
		return 0, err
	}
	return body.Offset, nil
}

// openBody verifies cursor's MAC and that it was issued for queryKey.
func (s cursorSealer) openBody(cursor, queryKey string) (cursorBody, error) {
	invalid := fault.New(fault.Invalid, CodeInvalidCursor, "/cursor is not a cursor this query issued")
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) <= sha256.Size {
		return cursorBody{}, invalid
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write(raw[sha256.Size:])
	if !hmac.Equal(mac.Sum(nil), raw[:sha256.Size]) {
		return cursorBody{}, invalid
	}
	var body cursorBody
	if json.Unmarshal(raw[sha256.Size:], &body) != nil || body.Query != queryHash(queryKey) || body.Offset < 0 {
		return cursorBody{}, invalid
	}
	return body, nil
}

// SealPosition makes an opaque cursor holding pos (a keyset position of a listing other
// than search, e.g. GET /v1/audit), signed with the deployment's cursor key and bound to
// queryKey: a cursor opens only for the query (and caller) that got it.
func (m *Tools) SealPosition(pos, queryKey string) string {
	return m.cursors().sealBody(cursorBody{Query: queryHash("position|" + queryKey), Pos: pos})
}

// OpenPosition returns the position SealPosition sealed for queryKey, or a 400
// INVALID_CURSOR error naming the cursor parameter.
func (m *Tools) OpenPosition(cursor, queryKey string) (string, error) {
	body, err := m.cursors().openBody(cursor, "position|"+queryKey)
	if err != nil {
		return "", err
	}
	if body.Pos == "" {
		return "", fault.New(fault.Invalid, CodeInvalidCursor, "cursor is not a cursor this query issued")
	}
	return body.Pos, nil
}

func queryHash(q string) string {
	sum := sha256.Sum256([]byte(q))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
