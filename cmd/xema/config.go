package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// applyConfig sets the flags of fs from a YAML file: a mapping of flag names (without the
// dashes) to values, a list for a repeatable flag. ${VAR} and ${VAR:-default} in string values
// expand from the environment; an unset ${VAR} without a default is an error, never an empty
// string (a missing secret must not start a gateway that quietly lacks it). A flag given on
// the command line keeps its value: flags override the file. An unknown key is an error.
func applyConfig(fs *pflag.FlagSet, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if err := applyKey(fs, key, doc[key]); err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, key, err)
		}
	}
	return nil
}

func applyKey(fs *pflag.FlagSet, key string, value any) error {
	f := fs.Lookup(key)
	if f == nil || key == "config" {
		return fmt.Errorf("not a flag of xema serve")
	}
	if f.Changed {
		return nil // the command line wins
	}
	var items []string
	list, isList := value.([]any)
	if !isList {
		list = []any{value}
	}
	_, structured := f.Value.(structuredFlag)
	for _, v := range list {
		var s string
		var err error
		if m, ok := v.(map[string]any); ok && structured {
			s, err = mapping(m)
		} else {
			s, err = scalar(v)
		}
		if err != nil {
			return err
		}
		items = append(items, s)
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if err := sv.Replace(items); err != nil {
			return err
		}
		f.Changed = true
		return nil
	}
	if isList {
		return fmt.Errorf("takes one value, not a list")
	}
	return fs.Set(key, items[0])
}

// structuredFlag is a flag whose items may be mappings in the config file: each is handed
// to the flag as a JSON object (--approval-webhook).
type structuredFlag interface{ structured() }

// mapping turns one YAML mapping of scalars into a JSON object, expanding ${VAR}.
func mapping(m map[string]any) (string, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case string:
			s, err := expandEnv(x)
			if err != nil {
				return "", fmt.Errorf("%s: %w", k, err)
			}
			out[k] = s
		case bool, int, int64, uint64, float64, nil:
			out[k] = x
		default:
			return "", fmt.Errorf("%s: want a string, number or boolean, got %T", k, v)
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	return string(raw), nil
}

// scalar turns one YAML value into the flag's text, expanding ${VAR}.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return expandEnv(x)
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	}
	return "", fmt.Errorf("want a string, number, boolean or a list of those, got %T", v)
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} and ${VAR:-default}; nothing else (a lone $ stays as written).
func expandEnv(s string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(m string) string {
		g := envRef.FindStringSubmatch(m)
		if v, ok := os.LookupEnv(g[1]); ok && (v != "" || g[2] == "") {
			return v
		}
		if g[2] != "" {
			return g[3]
		}
		missing = append(missing, g[1])
		return ""
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("environment variable %s is not set", strings.Join(missing, ", "))
	}
	return out, nil
}
