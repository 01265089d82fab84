// Package decisionlog ships the gateway's decisions in OPA's decision-log format (one event
// per decision: decision_id, path, input, result, bundles, timestamp), with the gateway's
// reasons in the result, so existing OPA log pipelines take them unchanged. Events are
// batched off the call path: a full buffer drops (and counts) events rather than slowing
// calls or growing memory; the audit log remains the system of record.
package decisionlog

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xemahq/xema/internal/store"
)

// Path is the decision's path as OPA names it.
const Path = "xema/authz/decision"

// Event is one decision in OPA's decision-log format.
type Event struct {
	Labels     map[string]string `json:"labels"`
	DecisionID string            `json:"decision_id"`
	Path       string            `json:"path"`
	Input      any               `json:"input"`
	Result     Result            `json:"result"`
	Bundles    map[string]Bundle `json:"bundles"`
	Timestamp  string            `json:"timestamp"`
	Erased     []string          `json:"erased,omitempty"`
	// Xema is what the gateway adds: the audit record and what became of the call.
	Xema Xema `json:"xema"`
}

// Result is data.xema.authz.decision as recorded.
type Result struct {
	Allow       bool            `json:"allow"`
	Reasons     json.RawMessage `json:"reasons"`
	Suggestions json.RawMessage `json:"suggestions,omitempty"`
	Obligations json.RawMessage `json:"obligations,omitempty"`
}

// Bundle names the bundle revision that decided.
type Bundle struct {
	Revision string `json:"revision"`
}

// Xema is the gateway's own part of an event.
type Xema struct {
	AuditID  string `json:"auditId"`
	Org      string `json:"org"`
	Decision string `json:"decision"`
	Outcome  string `json:"outcome"`
}

// Options configure an Exporter.
type Options struct {
	// Sink is "stdout", "file:PATH" or an http(s) URL (POSTed a gzipped JSON array per batch,
	// as OPA's decision-log service receives it).
	Sink string
	// Mask lists JSON pointers (e.g. /input/session) erased from every event's input.
	Mask []string
	// Labels are sent with every event (OPA's labels: id, version, ...).
	Labels map[string]string
	// BatchSize and Interval bound a batch; Buffer bounds events waiting (0: defaults).
	BatchSize int
	Interval  time.Duration
	Buffer    int
	Client    *http.Client
}

// Exporter batches events to a sink.
type Exporter struct {
	opts    Options
	write   func(ctx context.Context, events []Event) error
	in      chan store.AuditRecord
	done    chan struct{}
	dropped atomic.Int64
	once    sync.Once
}

// New checks opts and starts the exporter.
func New(opts Options) (*Exporter, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 10000
	}
	for _, m := range opts.Mask {
		if !strings.HasPrefix(m, "/input/") {
			return nil, fmt.Errorf("--decision-log-mask %q: want a JSON pointer into the input, such as /input/session", m)
		}
	}
	e := &Exporter{opts: opts, in: make(chan store.AuditRecord, opts.Buffer), done: make(chan struct{})}
	switch s := opts.Sink; {
	case s == "stdout":
		e.write = e.lines(os.Stdout)
	case strings.HasPrefix(s, "file:") && len(s) > len("file:"):
		f, err := os.OpenFile(strings.TrimPrefix(s, "file:"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--decision-log %q: %w", s, err)
		}
		e.write = e.lines(f)
	case strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://"):
		if e.opts.Client == nil {
			e.opts.Client = &http.Client{Timeout: 10 * time.Second}
		}
		e.write = e.post
	default:
		return nil, fmt.Errorf("--decision-log %q: want stdout, file:PATH or an http(s) URL", s)
	}
	go e.run()
	return e, nil
}

// Dropped counts the events a full buffer refused.
func (e *Exporter) Dropped() int64 { return e.dropped.Load() }

// Records takes committed audit records and queues the decision records among them (those
// carrying the policy input); it never blocks, and the events are built off the audit log's
// writer, by the exporter.
func (e *Exporter) Records(rs []store.AuditRecord) {
	for _, r := range rs {
		if len(r.PolicyInput) == 0 {
			continue
		}
		select {
		case e.in <- r:
		default:
			if e.dropped.Add(1) == 1 {
				slog.Warn("decision log: buffer full, dropping events (counted; the audit log keeps them)")
			}
		}
	}
}

func (e *Exporter) event(r store.AuditRecord) (Event, error) {
	var input map[string]any
	if err := json.Unmarshal(r.PolicyInput, &input); err != nil {
		return Event{}, err
	}
	var reasons []json.RawMessage
	_ = json.Unmarshal(r.Reasons, &reasons)
	ev := Event{Labels: e.opts.Labels, DecisionID: r.ID, Path: Path, Input: input,
		Result:    Result{Allow: len(reasons) == 0, Reasons: orEmpty(r.Reasons), Suggestions: r.Suggestions, Obligations: r.Obligations},
		Bundles:   map[string]Bundle{"xema": {Revision: r.BundleRevision}},
		Timestamp: r.Time.UTC().Format(time.RFC3339Nano),
		Xema:      Xema{AuditID: r.ID, Org: r.Org, Decision: r.Decision, Outcome: r.Outcome}}
	var secrets []string
	for _, m := range e.opts.Mask {
		if v, ok := erase(input, strings.Split(strings.TrimPrefix(m, "/input/"), "/")); ok {
			ev.Erased = append(ev.Erased, m)
			secrets = leaves(v, secrets)
		}
	}
	if len(secrets) > 0 {
		// A masked value is masked wherever the event repeats it: a reason's detail names the
		// resource, a suggestion the environment, the gateway's part the org.
		slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) }) // longest first
		scrubAll := func(s string) string {
			for _, v := range secrets {
				s = strings.ReplaceAll(s, v, Masked)
			}
			return s
		}
		scrubValue(input, scrubAll)
		ev.Result.Reasons = scrubRaw(ev.Result.Reasons, scrubAll)
		ev.Result.Suggestions = scrubRaw(ev.Result.Suggestions, scrubAll)
		ev.Result.Obligations = scrubRaw(ev.Result.Obligations, scrubAll)
		ev.Xema.Org = scrubAll(ev.Xema.Org)
	}
	return ev, nil
}

// Masked replaces a masked value wherever an exported event repeats it.
const Masked = "[masked]"

// erase removes the member at path (JSON pointer tokens) from doc; it returns the value
// removed and whether there was one.
func erase(doc map[string]any, path []string) (any, bool) {
	for i, tok := range path {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if i == len(path)-1 {
			v, ok := doc[tok]
			if !ok {
				return nil, false
			}
			delete(doc, tok)
			return v, true
		}
		next, ok := doc[tok].(map[string]any)
		if !ok {
			return nil, false
		}
		doc = next
	}
	return nil, false
}

// leaves appends the non-empty scalars of v, as text, to out.
func leaves(v any, out []string) []string {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			out = leaves(e, out)
		}
	case []any:
		for _, e := range x {
			out = leaves(e, out)
		}
	case string:
		if x != "" {
			out = append(out, x)
		}
	case nil:
	default:
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// scrubValue rewrites every string (keys aside) of a decoded JSON document in place.
func scrubValue(v any, scrub func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = scrubValue(e, scrub)
		}
	case []any:
		for i, e := range x {
			x[i] = scrubValue(e, scrub)
		}
	case string:
		return scrub(x)
	}
	return v
}

// scrubRaw is scrubValue over raw JSON; JSON that does not decode is dropped, never shipped
// unscrubbed.
func scrubRaw(raw json.RawMessage, scrub func(string) string) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil
	}
	out, err := json.Marshal(scrubValue(v, scrub))
	if err != nil {
		return nil
	}
	return out
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("[]")
	}
	return raw
}

func (e *Exporter) run() {
	defer close(e.done)
	tick := time.NewTicker(e.opts.Interval)
	defer tick.Stop()
	var batch []Event
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := e.write(ctx, batch); err != nil {
			slog.Warn("decision log: batch not shipped", "events", len(batch), "err", err)
		}
		cancel()
		batch = batch[:0]
	}
	for {
		select {
		case r, ok := <-e.in:
			if !ok {
				flush()
				return
			}
			ev, err := e.event(r)
			if err != nil {
				slog.Warn("decision log: event left out", "auditId", r.ID, "err", err)
				continue
			}
			batch = append(batch, ev)
			if len(batch) >= e.opts.BatchSize {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// Close ships what is queued and stops.
func (e *Exporter) Close() {
	e.once.Do(func() { close(e.in) })
	<-e.done
}

func (e *Exporter) lines(w io.Writer) func(context.Context, []Event) error {
	return func(_ context.Context, events []Event) error {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, ev := range events {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		}
		_, err := w.Write(buf.Bytes())
		return err
	}
}

func (e *Exporter) post(ctx context.Context, events []Event) error {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if err := json.NewEncoder(gz).Encode(events); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.opts.Sink, &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := e.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("sink answered %s", resp.Status)
	}
	return nil
}
