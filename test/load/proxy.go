package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
	"github.com/xemahq/xema/internal/store/engine"
)

// The bare proxy is the two HTTP hops of a funnel call with nothing else: a process of its
// own that reads each POST, sends its body to the no-op provider over a pooled client and
// copies the answer back. It is what the issue calls the physical limit of a gateway in
// the middle, measured on the same machine in the same run, so the funnel's own cost is the
// difference between the two rows, not between the funnel and one hop.

// The audited proxy is the bare proxy plus what the funnel's audit guarantee writes: a
// decision record committed before the call goes on and an outcome record committed before
// the answer, through the gateway's own group-committed, hash-chained audit log on the same
// engine. Nothing else of the funnel runs: its row is what the gateway's audit log costs on
// this engine, against the audited floor (journal.go), what the guarantee itself costs.

// proxyConfig is the hidden flags that make the harness's binary the bare proxy.
type proxyConfig struct {
	listen, upstream string
	// dir, when set, makes it the audited proxy, on the store of dsn ("": SQLite under dir,
	// the embedded default).
	dsn, dir string
	// journal, when set, makes it the audited floor, writing its records to this file.
	journal string
}

func (c *proxyConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "bare-proxy-listen", "", "internal: serve as the bare proxy on this address (the harness starts it)")
	fs.StringVar(&c.upstream, "bare-proxy-upstream", "", "internal: the bare proxy's upstream URL")
	fs.StringVar(&c.dsn, "bare-proxy-store", "", "internal: the audited proxy's store DSN")
	fs.StringVar(&c.dir, "bare-proxy-dir", "", "internal: the audited proxy's data directory")
	fs.StringVar(&c.journal, "bare-proxy-journal", "", "internal: the audited floor's journal file")
}

func (c proxyConfig) args() []string {
	return []string{"-bare-proxy-listen", c.listen, "-bare-proxy-upstream", c.upstream, "-bare-proxy-store", c.dsn, "-bare-proxy-dir", c.dir, "-bare-proxy-journal", c.journal}
}

// serveProxy runs the bare proxy, audited when c.dir is set, the audited floor when
// c.journal is, until the process is stopped.
func serveProxy(c proxyConfig) error {
	ctx := context.Background()
	var log *audit.Log
	var jn *journal
	if c.journal != "" {
		var err error
		if jn, err = openJournal(c.journal, []byte("load-floor-chain-key")); err != nil {
			return err
		}
	}
	if c.dir != "" {
		st, err := engine.Open(ctx, c.dsn, c.dir)
		if err != nil {
			return fmt.Errorf("audited proxy: %w", err)
		}
		defer st.Close()
		log = &audit.Log{Store: st, Chain: audit.NewChain([]byte("load-proxy-chain-key"))}
		defer log.Close()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("bare proxy: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var rec store.AuditRecord
		var id string
		began := time.Now()
		if jn != nil {
			id = audit.NewID("inv_")
			if err := jn.append(decisionRecord(id, audit.InputHash([]byte("load-proxy-input-key"), body), began)); err != nil {
				http.Error(w, "journal: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		if log != nil {
			rec = proxyRecord(body)
			if err := log.Append(r.Context(), rec); err != nil {
				http.Error(w, "audit: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		resp, err := client.Post(c.upstream, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, "upstream body: "+err.Error(), http.StatusBadGateway)
			return
		}
		if jn != nil {
			if err := jn.append(outcomeRecord(id, resp.StatusCode, time.Since(began), time.Now())); err != nil {
				http.Error(w, "journal: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		if log != nil {
			outcome := rec
			outcome.ParentID, outcome.ID, outcome.PolicyInput = rec.ID, audit.OutcomeID(rec.ID), nil
			outcome.Outcome, outcome.Runner, outcome.Time = "ok", "http", time.Now()
			if err := log.Append(context.WithoutCancel(r.Context()), outcome); err != nil {
				http.Error(w, "audit: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	})}
	return srv.Serve(ln)
}

// proxyInput is the policy input a decision record of the audited proxy keeps: the one the
// gateway records for the funnel's call (see opaTarget).
var proxyInput = func() []byte {
	raw, _ := json.Marshal(policy.Input{Ref: noopRef, Subject: policy.Subject{Kind: "agent", Ref: "agent:support-bot"},
		Groups: []string{}, Roles: []string{}, Environment: "project", Resource: "a", Armed: []string{"*"}, Org: "default"})
	return raw // a struct of strings always encodes
}()

// proxyRecord is the decision record of one call of the audited proxy, of the funnel's
// columns and sizes.
func proxyRecord(body []byte) store.AuditRecord {
	return store.AuditRecord{ID: audit.NewID("inv_"), Time: time.Now(), Org: "default", Ref: noopRef,
		SubjectKind: "agent", SubjectRef: "agent:support-bot", Environment: "project",
		Decision: audit.DecisionAllowed, Outcome: "admitted", BundleRevision: "load",
		InputHash: audit.InputHash([]byte("load-proxy-input-key"), body), Reasons: []byte(`[]`), Suggestions: []byte(`[]`),
		Obligations: []byte(`[{"kind":"quota","requests":1000000000,"per":"24h"},{"kind":"rate-limit","requests":100000,"per":"1s"}]`),
		PolicyInput: proxyInput}
}

// proxyProc is a running bare proxy.
type proxyProc struct {
	cmd *exec.Cmd
	url string
}

// startProxy starts this binary again as the bare proxy of c (its listen address
// chosen here), logging to name.log under dir.
func startProxy(dir, name string, c proxyConfig) (*proxyProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	if c.listen, err = freeAddr(); err != nil {
		return nil, err
	}
	p := &proxyProc{cmd: exec.Command(self, c.args()...), url: "http://" + c.listen + "/"}
	if err := start(p.cmd, filepath.Join(dir, name+".log")); err != nil {
		return nil, err
	}
	if err := waitOK(p.url); err != nil {
		p.stop()
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	return p, nil
}

func (p *proxyProc) stop() { stop(p.cmd) }

// proxyTarget is the direct target's call through the bare proxy.
func proxyTarget(p *proxyProc) target {
	tg := directTarget(p.url)
	tg.name, tg.kind, tg.pid = "bare proxy (two hops, no funnel, its own process)", "proxy", p.cmd.Process.Pid
	return tg
}

// auditedProxyTarget is the direct target's call through the audited proxy.
func auditedProxyTarget(p *proxyProc) target {
	tg := directTarget(p.url)
	tg.name, tg.kind, tg.pid = "bare proxy + the audit log (a decision and an outcome record a call, as the funnel commits them)", "proxy-audited", p.cmd.Process.Pid
	return tg
}

// floorTarget is the direct target's call through the audited floor.
func floorTarget(p *proxyProc) target {
	tg := directTarget(p.url)
	tg.name, tg.kind, tg.pid = "**the audited floor** (bare proxy + two durable chained records a call in an fdatasync'd file journal)", "floor", p.cmd.Process.Pid
	return tg
}
