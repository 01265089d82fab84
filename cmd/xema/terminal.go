package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What the CLI prints may hold what callers chose (a resource in a denial's detail, a
// reason, a record written before identity strings were checked): a control character there
// would be acted on by the reader's terminal (retitle it, clear it, forge lines). Every
// command writes through terminalWriter, which escapes them; table cells and text lines
// escape their values with printable, so a newline or tab in a value cannot forge a row.

// printable is s with every control character, bidirectional override and invalid byte
// escaped (\u001b, \x9b); s itself when it holds none.
func printable(s string) string { return escapeText(s, false) }

// escapeText escapes s; with layout, newlines and tabs are kept (the printers' own).
func escapeText(s string, layout bool) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return unsafeRune(r, layout) }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, layout):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune: C0 and C1 controls and DEL, the bidirectional overrides and isolates (they
// reorder what the terminal shows), and invalid UTF-8 (RuneError).
func unsafeRune(r rune, layout bool) bool {
	switch {
	case layout && (r == '\n' || r == '\t'):
		return false
	case unicode.IsControl(r), r == utf8.RuneError:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// terminalWriter escapes what it writes (newlines and tabs aside). A rune split across two
// writes is held until it is whole. The escapes are JSON escapes too (\u001b), so JSON
// output stays valid JSON with the same strings.
type terminalWriter struct {
	w       io.Writer
	pending []byte
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	buf := append(t.pending, p...)
	whole := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				whole = i
			}
			break
		}
	}
	t.pending = append([]byte(nil), buf[whole:]...)
	if _, err := io.WriteString(t.w, escapeText(string(buf[:whole]), true)); err != nil {
		return 0, err
	}
	return len(p), nil
}
