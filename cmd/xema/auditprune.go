package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/deploykeys"
)

// retention is a flag of a duration that also takes days ("90d").
type retention struct{ d *time.Duration }

func (r retention) String() string {
	if r.d == nil || *r.d == 0 {
		return "0"
	}
	if *r.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(*r.d/(24*time.Hour)), 10) + "d"
	}
	return r.d.String()
}

func (r retention) Set(s string) error {
	d, err := parseRetention(s)
	if err != nil {
		return err
	}
	*r.d = d
	return nil
}

func (retention) Type() string { return "duration" }

// parseRetention reads "90d" (days) or a Go duration ("36h").
func parseRetention(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%q: want whole days such as 90d, or a duration such as 36h", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want whole days such as 90d, or a duration such as 36h", s)
	}
	return d, nil
}

// newAuditPruneCmd is `xema audit prune`.
func newAuditPruneCmd() *cobra.Command {
	var sf storeFlags
	var mf masterFlags
	var beforeAt, archive string
	var olderThan time.Duration
	var batch int
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove audit records older than a time, optionally archiving them to a verifiable file first",
		Long: `prune verifies the records to remove (it refuses to erase a chain that does not verify), writes
them to --archive (gzip'd JSON Lines with a manifest of the chain segments; verify it with
xema audit verify --archive), checkpoints each chain's last removed link, then deletes in batches
of --batch records while the gateway keeps appending. xema audit verify then verifies each chain
from its checkpoint on. serve --audit-retain runs the same prune every 10 minutes, without an
archive.`,
		Example: `  xema audit prune --data-dir .xema --before 2026-09-01T00:00:00Z --archive audit-until-sept.jsonl.gz
  xema audit prune --store postgres://... --older-than 90d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var before time.Time
			switch {
			case (beforeAt == "") == (olderThan == 0):
				return &exitError{code: 2, err: errors.New("give one of --before and --older-than")}
			case beforeAt != "":
				t, err := time.Parse(time.RFC3339, beforeAt)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--before %q: want an RFC 3339 time: %w", beforeAt, err)}
				}
				before = t
			default:
				before = time.Now().Add(-olderThan)
			}
			if before.After(time.Now()) {
				return &exitError{code: 2, err: fmt.Errorf("--before %s: in the future", before.Format(time.RFC3339))}
			}
			if batch < 1 || batch > 100_000 {
				return &exitError{code: 2, err: fmt.Errorf("--batch %d: want 1 to 100000", batch)}
			}
			ctx := cmd.Context()
			st, w, err := openKeyed(ctx, &sf, &mf)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := deploykeys.ChainKeys(ctx, st, w)
			if err != nil {
				return err
			}
			opt := audit.PruneOptions{Before: before, Batch: batch}
			if archive != "" {
				af, err := createArchive(archive)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				defer af.discard()
				opt.Archive = af
			}
			res, err := audit.Prune(ctx, st, keys, opt)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if archive != "" {
				fmt.Fprintf(out, "archived %d record(s) to %s\n", res.Archived, archive)
			}
			fmt.Fprintf(out, "pruned %d record(s) older than %s from %d chain(s)\n", res.Deleted, before.UTC().Format(time.RFC3339), res.Chains)
			return nil
		},
	}
	sf.add(cmd)
	mf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&beforeAt, "before", "", "remove records older than this RFC 3339 time")
	f.Var(retention{&olderThan}, "older-than", "remove records older than this age (90d, 36h)")
	f.StringVar(&archive, "archive", "", "write the removed records to this new file first (gzip'd JSON Lines)")
	f.IntVar(&batch, "batch", audit.DefaultPruneBatch, "records one delete removes (each its own short transaction)")
	return cmd
}

// archiveFile is an archive written aside and renamed into place by Sync, which Prune calls
// once the archive is whole and before it removes anything: an archive file that exists is
// complete, and no record is removed before its archive is durable.
type archiveFile struct {
	*os.File
	final string
	done  bool
}

func createArchive(path string) (*archiveFile, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("--archive %s: exists; name a new file", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return nil, fmt.Errorf("--archive: %w", err)
	}
	return &archiveFile{File: f, final: path}, nil
}

// Sync makes the archive durable under its final name.
func (a *archiveFile) Sync() error {
	if err := a.File.Sync(); err != nil {
		return err
	}
	if err := a.Close(); err != nil {
		return err
	}
	if err := os.Link(a.Name(), a.final); err != nil { // never over a file created meanwhile
		return err
	}
	a.done = true
	_ = os.Remove(a.Name())
	d, err := os.Open(filepath.Dir(a.final))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// discard removes an archive never completed.
func (a *archiveFile) discard() {
	if !a.done {
		a.Close()
		os.Remove(a.Name())
	}
}
