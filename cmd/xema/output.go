package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
)

// queryOf is the query string of the flags that were given: empty values are left out.
func queryOf(params map[string]string) url.Values {
	q := url.Values{}
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// writeJSON prints v as indented JSON (two spaces, one trailing newline): the one printer
// of every command's --format json and of the admin commands' answers.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
