package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"agent:support-bot":              "agent:support-bot",
		"é and 日本":                       "é and 日本",
		"agent:x\x1b]0;PWNED\x07\x1b[2J": `agent:x\u001b]0;PWNED\u0007\u001b[2J`,
		"a\nb\tc\rd":                     `a\u000ab\u0009c\u000dd`,
		"csi \u009b2J del \x7f":          `csi \u009b2J del \u007f`,
		"bad \x9b byte":                  `bad \x9b byte`,
		"rtl \u202e txt.exe":             `rtl \u202e txt.exe`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTerminalWriter: layout (newlines, tabs) passes, escapes do not, a rune split across
// writes is kept whole, and JSON written through it stays the same JSON.
func TestTerminalWriter(t *testing.T) {
	var out bytes.Buffer
	w := &terminalWriter{w: &out}
	for _, part := range []string{"a\tb\n", "\x1b[2J", "é"[:1], "é"[1:], "\n"} {
		if n, err := w.Write([]byte(part)); err != nil || n != len(part) {
			t.Fatalf("Write(%q) = %d, %v", part, n, err)
		}
	}
	if got, want := out.String(), "a\tb\n\\u001b[2Jé\n"; got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	out.Reset()
	value := map[string]string{"subject": "agent:x\u009b\u007f\u202e"}
	if err := writeJSON(w, value); err != nil {
		t.Fatal(err)
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["subject"] != value["subject"] {
		t.Fatalf("JSON through the writer: %q %v", out.String(), err)
	}
	if strings.ContainsAny(out.String(), "\u009b\u007f\u202e") {
		t.Fatalf("raw controls in %q", out.String())
	}
}
