// Package testpg starts a real PostgreSQL server for tests: one per test binary, in a
// directory of its own on a free port, with a fresh database per test.
//
// A package using it has
//
//	func TestMain(m *testing.M) { testpg.Main(m) }
//
// and calls NewDatabase(t) for a database URL. XEMA_TEST_POSTGRES_URL points the tests at an
// existing server instead (its role needs CREATEDB). When no server can be started the
// tests fail, naming what is missing, unless XEMA_TEST_SKIP_POSTGRES=1.
package testpg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xemahq/xema/internal/testnet"
)

// Environment variables read by the harness.
const (
	EnvURL  = "XEMA_TEST_POSTGRES_URL"
	EnvSkip = "XEMA_TEST_SKIP_POSTGRES"
)

var (
	mainRunning bool
	once        sync.Once
	srv         *server
	startErr    error
)

// Main runs the tests of m and then stops the server if one was started. Call it from
// TestMain: it does not return.
func Main(m *testing.M) {
	mainRunning = true
	code := m.Run()
	if srv != nil {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testpg:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Start returns the URL of the test binary's server (database "postgres"), starting it on
// first use.
func Start(tb testing.TB) string {
	tb.Helper()
	if !mainRunning {
		tb.Fatal("testpg: the package's TestMain must call testpg.Main(m), which stops the server")
	}
	once.Do(func() { srv, startErr = startServer() })
	if startErr != nil {
		if os.Getenv(EnvSkip) == "1" {
			tb.Skipf("testpg: %v (skipped: %s=1)", startErr, EnvSkip)
		}
		tb.Fatalf("testpg: %v\n(set %s to an existing server, or %s=1 to skip PostgreSQL tests)", startErr, EnvURL, EnvSkip)
	}
	return srv.url
}

// NewDatabase creates an empty database on the server, dropped when tb ends, and returns its URL.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	admin := Start(tb)
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	name := "xema_test_" + hex.EncodeToString(b[:])
	if err := adminExec(admin, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("testpg: create database: %v", err)
	}
	tb.Cleanup(func() {
		if err := adminExec(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("testpg: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("testpg: server URL does not parse: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func adminExec(admin, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// server is a started PostgreSQL: dir holds its data directory, socket and log.
type server struct {
	url    string
	bin    string // directory of initdb and pg_ctl; "" for an external server
	dir    string
	asRoot bool
	port   int  // kept across Pause and Resume
	sync   bool // fsync and synchronous commit on (Server); off for tests
}

// Server is a PostgreSQL started outside a test binary (the load harness), durable as in
// production: fsync and synchronous commit on.
type Server struct {
	// URL is its administrator's URL (database "postgres").
	URL string
	s   *server
}

// StartServer starts a PostgreSQL as Start does, for a program that is not a test; Stop
// removes it.
func StartServer() (*Server, error) {
	bin, err := findBinaries(debianRoot)
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, asRoot: os.Geteuid() == 0, sync: true}
	if err := s.initdb(); err != nil {
		return nil, errors.Join(err, s.remove())
	}
	for range 3 {
		if err = s.start(); err == nil {
			return &Server{URL: s.url, s: s}, nil
		}
	}
	return nil, errors.Join(err, s.remove())
}

// CreateDatabase creates the empty database name and returns its URL.
func (s *Server) CreateDatabase(name string) (string, error) {
	if err := adminExec(s.URL, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error { return s.s.stop() }

// Crash stops the server as a power cut would to its processes: pg_ctl stop -m immediate,
// no checkpoint and no WAL flush beyond what commits already forced. Restart brings it back
// on its data.
func (s *Server) Crash() error {
	return s.s.run("pg_ctl", "-D", s.s.dataDir(), "-m", "immediate", "-w", "stop")
}

// Restart starts a crashed server again on the same port (it recovers from its WAL).
func (s *Server) Restart() error { return s.s.start() }

func startServer() (*server, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return &server{url: u}, nil
	}
	bin, err := findBinaries(debianRoot)
	if err != nil {
		return nil, err
	}
	s := &server{bin: bin, asRoot: os.Geteuid() == 0}
	if err := s.initdb(); err != nil {
		return nil, errors.Join(err, s.remove())
	}
	// A free port can be taken between choosing it and binding it: try a few.
	for range 3 {
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, errors.Join(err, s.remove())
}

// debianRoot holds one <major>/bin per installed PostgreSQL version (Debian, Ubuntu).
const debianRoot = "/usr/lib/postgresql"

// findBinaries returns the directory holding initdb and pg_ctl: from PATH, else the
// newest root/*/bin.
func findBinaries(root string) (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(initdb), nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "bin")) // the pattern is valid
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, pg_ctl) are on neither PATH nor %s/*/bin: install them (e.g. apt-get install postgresql)", root)
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir))) // not a number sorts last
	return n
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// maxSocketPath is the room for a unix socket path (sun_path, 108 bytes with the NUL).
const maxSocketPath = 107

func (s *server) initdb() error {
	base := os.TempDir()
	// The socket is DIR/.s.PGSQL.PORT; a long TMPDIR would overflow sun_path.
	if len(base)+len("/xema-pg-0123456789/.s.PGSQL.65535") > maxSocketPath {
		base = "/tmp"
	}
	// Not t.TempDir: its parent is 0700 and the postgres user could not enter it.
	dir, err := os.MkdirTemp(base, "xema-pg-")
	if err != nil {
		return fmt.Errorf("make server directory: %w", err)
	}
	s.dir = dir
	if s.asRoot {
		// initdb refuses to run as root: the cluster belongs to the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root, the cluster must belong to user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid) // numeric on unix
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return fmt.Errorf("hand %s to postgres: %w", dir, err)
		}
	}
	return s.run("initdb", "-D", s.dataDir(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C")
}

func (s *server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *server) start() error {
	port := s.port
	if port == 0 {
		var err error
		if port, err = testnet.Port(); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("-k %s -p %d -h 127.0.0.1", s.dir, port)
	if !s.sync { // tests need no durability across a crash of the machine
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := s.run("pg_ctl", "-D", s.dataDir(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return fmt.Errorf("%w\nserver log:\n%s", err, s.logTail())
	}
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	s.port = port
	return nil
}

// Pause stops the test binary's server as an outage would, keeping its data: pg_ctl stop
// -m fast, which ends every session at once but flushes the WAL first (the test server runs
// with synchronous_commit=off, so an immediate stop would lose commits it acknowledged); Resume starts it again on the same port. A test pausing the server must
// Resume it before it ends: other tests of the binary share it. Skips for an external
// server.
func Pause(tb testing.TB) {
	tb.Helper()
	Start(tb)
	if srv.bin == "" {
		tb.Skip("testpg: an external server (" + EnvURL + ") cannot be paused")
	}
	if err := srv.run("pg_ctl", "-D", srv.dataDir(), "-m", "fast", "-w", "stop"); err != nil {
		tb.Fatalf("testpg: pause: %v", err)
	}
}

// Resume starts a paused server again.
func Resume(tb testing.TB) {
	tb.Helper()
	if err := srv.start(); err != nil {
		tb.Fatalf("testpg: resume: %v", err)
	}
}

func (s *server) stop() error {
	if s.bin == "" {
		return nil
	}
	err := s.run("pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop")
	return errors.Join(err, s.remove())
}

func (s *server) remove() error {
	if s.dir == "" {
		return nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("remove server directory: %w", err)
	}
	return nil
}

// run runs a PostgreSQL program, as the postgres user when we are root.
func (s *server) run(prog string, args ...string) error {
	name, argv := filepath.Join(s.bin, prog), args
	if s.asRoot {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", filepath.Join(s.bin, prog)}, args...)
	}
	cmd := exec.Command(name, argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", prog, strings.Join(args, " "), err, out.String())
	}
	return nil
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log")) // best effort, for the error message
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
