package federation

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/xemahq/xema/internal/egress"
)

// StdioServer is a stdio MCP server the operator declared at start (xema serve
// --mcp-stdio or --mcp-stdio-config): the only command lines the gateway ever runs. The API
// registers a declared server by its id; it never sends a command line.
type StdioServer struct {
	ID      string            `json:"id"`
	Command string            `json:"command"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// Options configures a Federation.
type Options struct {
	// Egress decides the addresses a streamable-http server may be reached at (nil: public
	// addresses only).
	Egress *egress.Policy
	// Stdio are the operator-declared stdio servers by id.
	Stdio map[string]StdioServer
	// Connections holds the tokens of servers registered with auth oauth; nil refuses such
	// registrations. Secrets opens a registration's clientSecretRef.
	Connections Connections
	Secrets     Secrets
	// ConnectURL is the console page where an owner connects a server (a denial's
	// suggestion).
	ConnectURL string
}

var (
	stdioID = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParseStdioFlag reads one --mcp-stdio value: "ID=COMMAND [ARG]..." split on white space
// (no quoting; use --mcp-stdio-config for arguments with spaces or an environment).
func ParseStdioFlag(v string) (StdioServer, error) {
	id, line, ok := strings.Cut(v, "=")
	fields := strings.Fields(line)
	if !ok || len(fields) == 0 {
		return StdioServer{}, fmt.Errorf("--mcp-stdio %q: want ID=COMMAND [ARG...]", v)
	}
	s := StdioServer{ID: strings.TrimSpace(id), Command: fields[0], Args: fields[1:]}
	if err := s.check(); err != nil {
		return StdioServer{}, fmt.Errorf("--mcp-stdio: %w", err)
	}
	return s, nil
}

// LoadStdioConfig reads a --mcp-stdio-config file: a JSON array of {id, command, args, env}
// (or an object {"servers": [...]}).
func LoadStdioConfig(path string) ([]StdioServer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--mcp-stdio-config: %w", err)
	}
	var list []StdioServer
	if err := json.Unmarshal(raw, &list); err != nil {
		var doc struct {
			Servers []StdioServer `json:"servers"`
		}
		if err2 := json.Unmarshal(raw, &doc); err2 != nil {
			return nil, fmt.Errorf("--mcp-stdio-config %s: want a JSON array of {id, command, args, env}: %w", path, err)
		}
		list = doc.Servers
	}
	for _, s := range list {
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("--mcp-stdio-config %s: %w", path, err)
		}
	}
	return list, nil
}

// DeclareStdio indexes servers by id; an id declared twice is an error.
func DeclareStdio(servers []StdioServer) (map[string]StdioServer, error) {
	out := map[string]StdioServer{}
	for _, s := range servers {
		if _, dup := out[s.ID]; dup {
			return nil, fmt.Errorf("stdio MCP server %q is declared twice", s.ID)
		}
		out[s.ID] = s
	}
	return out, nil
}

func (s StdioServer) check() error {
	if !stdioID.MatchString(s.ID) || len(s.ID) > 64 {
		return fmt.Errorf("stdio MCP server id %q: want a provider id such as \"files\" (lower case, digits, dashes)", s.ID)
	}
	if s.Command == "" {
		return fmt.Errorf("stdio MCP server %q: command is required", s.ID)
	}
	for k := range s.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("stdio MCP server %q: env name %q is not a variable name", s.ID, k)
		}
	}
	return nil
}

// environ is the declared server's environment: a minimal one (PATH, HOME) plus what the
// operator declared; the gateway's own variables (keys, DSNs) never reach it.
func (s StdioServer) environ() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.Env[k])
	}
	return env
}
