package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xemahq/xema/internal/audit"
	"github.com/xemahq/xema/internal/deploykeys"
	"github.com/xemahq/xema/internal/masterkey"
	"github.com/xemahq/xema/internal/store/engine"
)

// errPostgresBackup points at PostgreSQL's own tools, which copy a database consistently.
var errPostgresBackup = errors.New("the store is PostgreSQL: back it up with pg_dump --format=custom under umask 077 (the dump holds all the store holds) and restore it with pg_restore (docs/operations.md, Backup and restore)")

// newBackupCmd is `xema backup`.
func newBackupCmd() *cobra.Command {
	var sf storeFlags
	var to string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Copy the embedded store consistently while the gateway serves (restore with xema restore)",
		Long: `backup writes a consistent copy of the embedded SQLite store to --to (a new file) while the
gateway keeps serving: SQLite's VACUUM INTO reads one snapshot without blocking the gateway's
writes. The copy is created 0600 (the owner's alone) whatever the umask: it holds everything the
store holds, the deployment's keys wrapped by the master key among them. Keep the master key
(DATA_DIR/master.key or your --master-key-file) and DATA_DIR/secret.key apart from it; a restore
needs both. For PostgreSQL use pg_dump/pg_restore (docs/operations.md).`,
		Example: `  xema backup --data-dir .xema --to /backups/xema-$(date +%F).db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return &exitError{code: 2, err: errors.New("--to: name the backup file to write")}
			}
			path, err := engine.SQLitePath(storeDSN(sf.dsn), sf.dataDir)
			if errors.Is(err, engine.ErrNotSQLite) {
				return &exitError{code: 2, err: errPostgresBackup}
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if err := engine.Backup(cmd.Context(), path, to); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s\n", path, to)
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the backup file to write (must not exist)")
	return cmd
}

// newRestoreCmd is `xema restore`.
func newRestoreCmd() *cobra.Command {
	var sf storeFlags
	var mf masterFlags
	var from string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a backup of the embedded store into a fresh data directory",
		Long: `restore checks the integrity of --from (a file written by xema backup) and copies it to the
store of --data-dir, which must not exist: a restore never overwrites a store. It then verifies
the audit chains of what it restored with the deployment's master key (--master-key-file,
` + masterkey.EnvKey + `, or DATA_DIR/master.key if already in place) and reports the result: intact,
broken (exit 1, each break named; the restored store is left for examination), or not verified
and why (no master key, or not this deployment's). Put the master key and secret.key in place
too before starting the gateway.`,
		Example: `  xema restore --from /backups/xema-2026-12-01.db --data-dir /var/lib/xema-restored --master-key-file /secrets/master.key`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return &exitError{code: 2, err: errors.New("--from: name the backup file to restore")}
			}
			path, err := engine.SQLitePath(storeDSN(sf.dsn), sf.dataDir)
			if errors.Is(err, engine.ErrNotSQLite) {
				return &exitError{code: 2, err: errPostgresBackup}
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if err := engine.Restore(cmd.Context(), from, path); err != nil {
				return &exitError{code: 2, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s to %s\n", from, path)
			return verifyRestored(cmd, &sf, &mf)
		},
	}
	sf.add(cmd)
	mf.add(cmd)
	cmd.Flags().StringVar(&from, "from", "", "the backup file to restore")
	return cmd
}

// verifyRestored verifies the audit chains of the store just restored and reports it: a
// backup altered at rest shows here, before a gateway serves from it. Without the master
// key (not in place yet, or another deployment's) it says the chains were not verified and
// why, never that they were.
func verifyRestored(cmd *cobra.Command, sf *storeFlags, mf *masterFlags) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	failed := func(err error) error {
		return &exitError{code: 2, err: fmt.Errorf("restored, but its audit chains were not verified: %w", err)}
	}
	st, err := sf.open(ctx)
	if err != nil {
		return failed(err)
	}
	defer st.Close()
	heads, err := st.ChainHeads(ctx)
	if err != nil {
		return failed(err)
	}
	w, err := mf.open(sf.dataDir)
	var keys [][]byte
	if err == nil {
		if keys, err = deploykeys.ChainKeys(ctx, st, w); err != nil && !errors.Is(err, masterkey.ErrWrongMasterKey) {
			return failed(err)
		}
	}
	if err != nil && len(heads) > 0 {
		var ee *exitError
		if errors.As(err, &ee) {
			err = ee.err
		}
		fmt.Fprintf(out, "audit chains NOT verified: %v\nput the deployment's master key in place, then run xema audit verify\n", err)
		return nil
	}
	var breaks []audit.Break
	if w != nil {
		if breaks, err = keyBreaks(ctx, st, w); err != nil {
			return failed(err)
		}
	}
	res, err := audit.Verify(ctx, st, keys, time.Time{})
	if err != nil {
		return failed(err)
	}
	if breaks = append(breaks, res.Breaks...); len(breaks) > 0 {
		return reportBreaks(out, breaks)
	}
	fmt.Fprint(out, "audit log verified ")
	printIntact(out, res)
	return nil
}
