// Command load measures the whole funnel in one run, on each store engine: it serves a no-op
// HTTP provider itself, starts `xema serve` (SQLite in a temporary directory; PostgreSQL
// started as internal/testpg does, durable, or the server of -store) with a capability
// whose runner is that provider, and a stock `opa run --server` on the gateway's own
// bundle, then drives each target with the same closed-loop generator (N workers, each
// sending its next request when the previous one is answered), loopback only:
//
//   - direct: the no-op provider itself, what the funnel adds to;
//   - bare proxy: the same call through a pass-through of its own process (this binary
//     again), the two HTTP hops of a gateway with no funnel;
//   - the audited floor: the bare proxy writing a decision record durable before it
//     forwards and an outcome record durable before it answers to an append-only file
//     journal, group-committed with fdatasync, each HMAC-chained to the one before (no
//     database, not audit.Log): the physical cost of the funnel's audit guarantee, against
//     which the funnel's RPS, CPU per call and p99 are printed as ratios;
//   - bare proxy + the audit log: the same pass-through writing the two audit records a
//     call the funnel writes, through the gateway's audit log on the same engine: what the
//     audit guarantee alone costs;
//   - funnel: POST /v1/capabilities/invoke of the no-op capability, the same call again
//     (decision cache hits), then a distinct resource per call (every decision a miss);
//   - opa: the same decision from the stock OPA server.
//
// For every target it reports the machine's CPU use and the harness's own over the window
// (/proc/stat, /proc/self/stat) and the provider's new connections; for the gateway and the
// proxies the CPU time per call (utime+stime of the process over the
// measured window, /proc/PID/stat); for the gateway the decision cache's hit rate and the
// audit records per write batch (/metrics), its write syscalls and bytes a call
// (/proc/PID/io: on SQLite, two writes a WAL frame), and its peak and final resident memory
// after the run (/proc/PID/status). With -cpuprofile every funnel window, the table's and
// the rounds', is profiled, and each round's line says what its audit writer and policy
// decision cost a call.
//
//	go run ./test/load -xema bin/xema -opa OPA_BINARY -workers 16 -duration 5s [-engines sqlite,postgres] [-store postgres://...] [-keep]
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/testpg"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.xema, "xema", "bin/xema", "xema binary")
	flag.StringVar(&cfg.opa, "opa", "", "stock opa binary (built from the module version in go.mod)")
	flag.StringVar(&cfg.engines, "engines", "sqlite,postgres", "store engines to run, in order: sqlite, postgres")
	flag.StringVar(&cfg.store, "store", "", "for the postgres engine, postgres://... of a server whose role may CREATE DATABASE; empty starts one as internal/testpg does")
	flag.IntVar(&cfg.workers, "workers", 16, "concurrent closed-loop workers (connections)")
	flag.IntVar(&cfg.count, "count", 200000, "at most this many requests per target")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "at most this long per target")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured warm-up per target")
	flag.IntVar(&cfg.rounds, "rounds", 1, "N > 1: after the table, measure the floor and both funnel targets N times more, alternating, and print the ranges of their ratios; 1: the table only")
	flag.BoolVar(&cfg.keep, "keep", false, "keep each engine's temporary directory (the gateway's SQLite file, the logs) and print its path")
	flag.StringVar(&cfg.profileDir, "cpuprofile", "", "directory: write the gateway's CPU and allocation profiles of each funnel target there, the table's and each round's (xema serve --pprof)")
	var proxy proxyConfig
	proxy.register(flag.CommandLine)
	flag.Parse()
	if cfg.rounds < 1 {
		fmt.Fprintf(os.Stderr, "load: -rounds %d: must be 1 (the table only) or more\n", cfg.rounds)
		os.Exit(2)
	}
	if proxy.listen != "" {
		if err := serveProxy(proxy); err != nil {
			slog.Error("load", "err", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		slog.Error("load", "err", err)
		os.Exit(1)
	}
}

type config struct {
	xema, opa, engines, store, profileDir string
	workers, count, rounds                int
	duration, warmup                      time.Duration
	keep                                  bool
}

func run(cfg config) error {
	if cfg.opa == "" {
		return errors.New("-opa is required")
	}
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	noop, err := startNoop()
	if err != nil {
		return err
	}
	defer noop.Close()
	fmt.Printf("machine: %s/%s, %d CPUs, %s; %d workers, at most %d requests or %s per target (after %s warm-up); gateway %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), cfg.workers, cfg.count, cfg.duration, cfg.warmup, cfg.xema)
	var pg *testpg.Server
	defer func() {
		if pg != nil {
			if err := pg.Stop(); err != nil {
				slog.Error("stop postgres", "err", err)
			}
		}
	}()
	for i, engine := range strings.Split(cfg.engines, ",") {
		dsn, proxyDSN := "", "" // the gateway's, the audited proxy's
		switch engine {
		case "sqlite":
		case "postgres":
			if dsn, err = postgresDatabase(cfg.store, &pg, fmt.Sprintf("%d", i)); err != nil {
				return err
			}
			if proxyDSN, err = postgresDatabase(cfg.store, &pg, fmt.Sprintf("%d_proxy", i)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("-engines: unknown engine %q", engine)
		}
		if err := runEngine(cfg, engine, dsn, proxyDSN, noop.URL); err != nil {
			return fmt.Errorf("%s: %w", engine, err)
		}
	}
	return nil
}

// postgresDatabase is a new database on the server of -store, or on one started on first use.
func postgresDatabase(admin string, pg **testpg.Server, name string) (string, error) {
	if admin == "" {
		if *pg == nil {
			s, err := testpg.StartServer()
			if err != nil {
				return "", fmt.Errorf("start postgres: %w", err)
			}
			*pg = s
		}
		admin = (*pg).URL
	}
	s := &testpg.Server{URL: admin}
	return s.CreateDatabase(fmt.Sprintf("xema_load_%d_%s", os.Getpid(), name))
}

func runEngine(cfg config, engine, dsn, proxyDSN, noopURL string) error {
	dir, err := os.MkdirTemp("", "xema-load-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Printf("keeping %s (-keep)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	gw, err := startGateway(cfg.xema, dir, dsn, cfg.profileDir != "")
	if err != nil {
		return err
	}
	defer gw.stop()
	if err := installNoop(gw, noopURL); err != nil {
		return err
	}
	opa, err := startOPA(cfg.opa, dir, gw)
	if err != nil {
		return err
	}
	defer opa.stop()

	proxy, err := startProxy(dir, "proxy", proxyConfig{upstream: noopURL})
	if err != nil {
		return err
	}
	defer proxy.stop()
	floor, err := startProxy(dir, "floor", proxyConfig{upstream: noopURL, journal: filepath.Join(dir, "floor.journal")})
	if err != nil {
		return err
	}
	defer floor.stop()
	auditedDir := filepath.Join(dir, "audited-proxy")
	if err := os.Mkdir(auditedDir, 0o700); err != nil {
		return err
	}
	audited, err := startProxy(dir, "audited-proxy", proxyConfig{upstream: noopURL, dsn: proxyDSN, dir: auditedDir})
	if err != nil {
		return err
	}
	defer audited.stop()

	fl := floorTarget(floor)
	cached := funnelTarget(gw, "funnel, cached (the same call)", false)
	defeating := funnelTarget(gw, "funnel, cache-defeating (a distinct resource per call)", true)
	targets := []target{directTarget(noopURL), proxyTarget(proxy), fl, auditedProxyTarget(audited), cached, defeating, opaTarget(opa.url)}
	fmt.Printf("\n### %s\n\n", engine)
	fmt.Println("| target | requests | RPS | p50 | p99 | RPS ÷ direct | server CPU per call | harness CPU per call (clients, no-op provider) | machine CPU busy | provider connections opened | gateway heap allocated per call | decision cache hits | audit records per batch (batches a call) | audit writer busy | gateway writes a call (syscalls, bytes) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	results := map[string]result{}
	for _, tg := range targets {
		r, err := measureTarget(cfg, gw, tg, engine, cfg.profileDir)
		if err != nil {
			return err
		}
		results[tg.kind] = r
		fmt.Printf("| %s | %d | %.0f | %s | %s | %.2f× | %s | %.0f µs | %s | %d | %s | %s | %s | %s | %s |\n", tg.name, r.n, r.rps(), r.pct(50), r.pct(99),
			r.rps()/results["direct"].rps(), r.cpuPerCall(), float64(r.self.Microseconds())/float64(r.n), r.machine, r.conns, r.allocated(), r.hitRate(), r.perBatch(), r.writerBusy(), r.writes())
	}
	// After the results table, so it stays one table.
	for _, tg := range targets {
		for _, line := range results[tg.kind].breakdown {
			fmt.Println(line)
		}
	}
	hwm, rss, err := memoryOf(gw.pid())
	if err != nil {
		return err
	}
	f, miss, o := results["funnel"], results["funnel-miss"], results["opa"]
	bare, withAudit, floorResult := results["proxy"], results["proxy-audited"], results["floor"]
	fmt.Printf("\ngateway memory after the run: VmHWM %s, VmRSS %s\n", hwm, rss)
	for _, g := range []struct {
		name string
		r    result
	}{{"cached", f}, {"cache-defeating", miss}} {
		rps, cpu, p99 := floorRatios(g.r, floorResult)
		fmt.Printf("%s funnel ÷ the audited floor: RPS %.2f×, CPU per call %.2f× (%s ÷ %s), p99 %.2f× (%s ÷ %s)\n", g.name,
			rps, cpu, g.r.cpuPerCall(), floorResult.cpuPerCall(), p99, g.r.pct(99), floorResult.pct(99))
	}
	fmt.Printf("funnel ÷ bare proxy (RPS): cached %.2f×, cache-defeating %.2f×\n", f.rps()/bare.rps(), miss.rps()/bare.rps())
	fmt.Printf("funnel ÷ bare proxy + the audit log (RPS): cached %.2f×, cache-defeating %.2f×\n", f.rps()/withAudit.rps(), miss.rps()/withAudit.rps())
	fmt.Printf("funnel ÷ stock OPA (RPS): cached %.2f×, cache-defeating %.2f×; funnel p99 cached %s, cache-defeating %s\n",
		f.rps()/o.rps(), miss.rps()/o.rps(), f.pct(99), miss.pct(99))
	if cfg.rounds > 1 {
		return alternate(cfg, gw, engine, fl, cached, defeating)
	}
	return nil
}

// measureTarget warms tg up, then measures it for cfg.duration (with dir, the gateway's
// profile of the window, in a file named by label: the engine, and the round).
func measureTarget(cfg config, gw *gateway, tg target, label, dir string) (result, error) {
	if _, err := drive(tg, cfg.workers, 1<<30, cfg.warmup); err != nil {
		return result{}, fmt.Errorf("%s warm-up: %w", tg.name, err)
	}
	m, err := gw.startMeasure(tg, dir, label, cfg.duration)
	if err != nil {
		return result{}, err
	}
	r, err := drive(tg, cfg.workers, cfg.count, cfg.duration)
	if err != nil {
		return result{}, fmt.Errorf("%s: %w", tg.name, err)
	}
	if err := m.finish(&r); err != nil {
		return result{}, fmt.Errorf("%s: %w", tg.name, err)
	}
	return r, nil
}

// floorRatios are the funnel's RPS, CPU per call (of its process) and p99 over the floor's.
func floorRatios(funnel, floor result) (rps, cpu, p99 float64) {
	perCall := func(r result) float64 { return float64(r.cpu) / float64(max(r.n, 1)) }
	return funnel.rps() / floor.rps(), perCall(funnel) / perCall(floor), float64(funnel.pct(99)) / float64(floor.pct(99))
}

// alternate measures the floor and the two funnel targets again, one after the other,
// cfg.rounds times, and prints the range and median of each ratio: on a shared machine the
// load shifts between the windows of one table, and alternating short windows lets it
// shift under both sides of a ratio alike.
func alternate(cfg config, gw *gateway, engine string, floor, cached, miss target) error {
	var ratios [2][3][]float64 // [cached, cache-defeating][RPS, CPU, p99]
	for round := range cfg.rounds {
		fl, err := measureTarget(cfg, gw, floor, engine, "")
		if err != nil {
			return err
		}
		for i, tg := range []target{cached, miss} {
			r, err := measureTarget(cfg, gw, tg, fmt.Sprintf("%s-round%d", engine, round+1), cfg.profileDir)
			if err != nil {
				return err
			}
			rps, cpu, p99 := floorRatios(r, fl)
			ratios[i][0], ratios[i][1], ratios[i][2] = append(ratios[i][0], rps), append(ratios[i][1], cpu), append(ratios[i][2], p99)
			fmt.Printf("round %d, %s: RPS %.2f×, CPU per call %.2f× (%s ÷ %s), audit records per batch %s, writes a call %s%s\n",
				round+1, tg.kind, rps, cpu, r.cpuPerCall(), fl.cpuPerCall(), r.perBatch(), r.writes(), r.writerAndPolicy())
		}
	}
	fmt.Printf("\nfunnel ÷ the audited floor over %d alternating rounds (floor, cached, cache-defeating; range, median):\n", cfg.rounds)
	for i, name := range []string{"cached", "cache-defeating"} {
		fmt.Printf("%s: RPS %s, CPU per call %s, p99 %s\n", name, spread(ratios[i][0]), spread(ratios[i][1]), spread(ratios[i][2]))
	}
	return nil
}

// spread is "min–max× (median m×)" of vs.
func spread(vs []float64) string {
	s := slices.Sorted(slices.Values(vs))
	mid := s[len(s)/2]
	if len(s)%2 == 0 {
		mid = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf("%.2f–%.2f× (median %.2f×)", s[0], s[len(s)-1], mid)
}

// startMeasure begins one measured window: the machine's CPU time and, for a target with a
// process of its own, that process's; for the gateway its decision cache counts and, with
// dir, a CPU profile of the window (its file named by label and the target).
func (g *gateway) startMeasure(tg target, dir, label string, d time.Duration) (*measure, error) {
	m := &measure{name: tg.name, pid: tg.pid, conns0: providerConns.Load()}
	var err error
	if m.machine0, err = machineNow(); err != nil {
		return nil, err
	}
	if m.self0, err = cpuOf(os.Getpid()); err != nil {
		return nil, err
	}
	if tg.pid != 0 {
		if m.cpu0, err = cpuOf(tg.pid); err != nil {
			return nil, err
		}
	}
	if !tg.gateway {
		return m, nil
	}
	m.g = g
	if m.io0, err = ioOf(tg.pid); err != nil {
		return nil, err
	}
	if m.metrics0, err = g.scrape(); err != nil {
		return nil, err
	}
	if dir != "" {
		m.path = filepath.Join(dir, fmt.Sprintf("%s-%s.prof", label, tg.kind))
		m.profile = g.profile(m.path, d)
	}
	return m, nil
}

// measure is one measured window.
type measure struct {
	g        *gateway // the target's, if the gateway serves it
	pid      int
	cpu0     time.Duration
	io0      ioCounts      // the gateway's
	self0    time.Duration // the harness's own: its clients and the no-op provider
	conns0   int64
	machine0 machineCPU
	metrics0 counters
	profile  <-chan error
	name     string // the target's
	path     string // of the profile, if one is taken
}

func (m *measure) finish(r *result) error {
	machine, err := machineNow()
	if err != nil {
		return err
	}
	self, err := cpuOf(os.Getpid())
	if err != nil {
		return err
	}
	r.machine, r.conns, r.self = machine.minus(m.machine0), providerConns.Load()-m.conns0, self-m.self0
	if m.pid != 0 {
		cpu, err := cpuOf(m.pid)
		if err != nil {
			return err
		}
		r.cpu = cpu - m.cpu0
	}
	if m.g == nil {
		return nil
	}
	io, err := ioOf(m.pid)
	if err != nil {
		return err
	}
	r.io = ioCounts{io.writes - m.io0.writes, io.bytes - m.io0.bytes}
	metrics, err := m.g.scrape()
	if err != nil {
		return err
	}
	r.metrics = metrics.minus(m.metrics0)
	if m.profile != nil {
		if err := <-m.profile; err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		perCall := float64(r.cpu.Microseconds()) / float64(max(r.n, 1))
		if r.breakdown, r.parts, err = breakdown(m.path, perCall); err != nil {
			return err
		}
		r.breakdown = append([]string{fmt.Sprintf("\nwhere the gateway's CPU goes, %s (%s):\n", m.name, m.path),
			"| part | share of the profile's samples | per call |", "|---|---|---|"}, r.breakdown...)
	}
	return nil
}
