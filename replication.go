package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/oncepay/oncepay/metrics"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/replica"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
)

// replicaConfig configures the continuous replication of the SQLite file
// (docs/replication.md).
type replicaConfig struct {
	url          string
	syncInterval time.Duration
	retention    time.Duration
	maxLag       time.Duration
}

func (r *replicaConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "replica", "", "replicate the SQLite file as it is written to file:///path/to/dir or s3://bucket/path (S3: credentials, region and endpoint from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL_S3); \"oncepay restore\" brings it back. Empty: none. SQLite only")
	fs.DurationVar(&r.syncInterval, "replica-sync-interval", replica.DefaultSyncInterval, "how often new writes are shipped to the replica: in steady state, about the most a machine lost loses")
	fs.DurationVar(&r.retention, "replica-retention", replica.DefaultRetention, "how long the replica keeps its history, so how far back \"restore --at\" reaches; a full snapshot is written as often")
	fs.DurationVar(&r.maxLag, "replica-max-lag", time.Minute, "replica lag past which GET /healthz answers 503 replica-behind")
}

func (r *replicaConfig) validate(db string) error {
	if r.url == "" {
		return nil
	}
	if pgstore.IsURL(db) {
		return errors.New("--replica replicates a SQLite file, and --db is PostgreSQL: use PostgreSQL's own replication and point-in-time recovery (streaming replicas, WAL archiving), or your provider's")
	}
	if err := replica.CheckURL(r.url); err != nil {
		return fmt.Errorf("--replica: %w", err)
	}
	if r.syncInterval <= 0 {
		return fmt.Errorf("--replica-sync-interval %s must be positive", r.syncInterval)
	}
	if r.retention <= 0 {
		return fmt.Errorf("--replica-retention %s must be positive", r.retention)
	}
	if r.maxLag <= r.syncInterval {
		return fmt.Errorf("--replica-max-lag (%s) must exceed --replica-sync-interval (%s): between two syncs the replica is that far behind", r.maxLag, r.syncInterval)
	}
	return nil
}

// warn logs each way the configuration breaks the retention rule: the
// replica's lag plus the time to restore must stay inside the provider's
// idempotency window, or a payment the replica missed, retried after a
// restore, reaches the provider as new and is charged again.
func (r *replicaConfig) warn(log *slog.Logger, window time.Duration) {
	if r.url == "" {
		return
	}
	if r.syncInterval+r.maxLag >= window {
		log.Warn("replication cannot keep the retention rule: the replica may fall this far behind before /healthz says so, leaving no time to restore inside the provider's idempotency window; a payment it missed, retried after a restore, would be charged again",
			"replica_sync_interval", r.syncInterval, "replica_max_lag", r.maxLag, "provider_key_window", window)
	}
	if r.retention < window {
		log.Warn("the replica keeps less history than the provider's idempotency window: restore --at cannot reach back to every point the provider still dedupes",
			"replica_retention", r.retention, "provider_key_window", window)
	}
}

// startReplica starts replicating the file a's store was opened on.
func (a *app) startReplica(c *config, log *slog.Logger) error {
	if c.replica.url == "" {
		return nil
	}
	rep, err := replica.Start(c.db, replica.Config{URL: c.replica.url, SyncInterval: c.replica.syncInterval, Retention: c.replica.retention, Log: log})
	if err != nil {
		return fmt.Errorf("--replica: %w", err)
	}
	a.replica = rep
	log.Info("replicating", "replica", replica.Redact(c.replica.url), "sync_interval", c.replica.syncInterval, "max_lag", c.replica.maxLag)
	return nil
}

// replicaStatus is the replica's status as the metrics read it.
func (a *app) replicaStatus() metrics.ReplicaStatus {
	s := a.replica.Status()
	return metrics.ReplicaStatus{Lag: s.Lag, LastSync: s.LastSync, Errors: s.Errors}
}

// replicaHealth is where the replica stands against --replica-max-lag, for
// GET /healthz and the admin pages.
func (a *app) replicaHealth(maxLag time.Duration) func() server.ReplicaStatus {
	return func() server.ReplicaStatus {
		s := a.replica.Status()
		return server.ReplicaStatus{Lag: s.Lag, MaxLag: maxLag, LastSync: s.LastSync, Errors: s.Errors}
	}
}

// restoreMarks is a store "oncepay restore" marks (sqlitestore).
type restoreMarks interface {
	Restored(ctx context.Context) (note string, at time.Time, err error)
	ClearRestored(ctx context.Context) error
}

// settleRestored runs, on a database restored from its replica, one
// reconcile pass before anyone is answered: what the replica held in
// progress is settled by asking the provider. A call the lost machine made
// may land at the provider up to its timeout after it was sent, and the
// restore came after the loss: the pass waits until the restore is that
// old, then settles every attempt in progress. The mark is cleared once
// nothing is left unknown.
func settleRestored(ctx context.Context, a *app, c *config, log *slog.Logger, observe func(payment.ReconcileResult)) error {
	m, ok := a.db.(restoreMarks)
	if !ok {
		return nil
	}
	note, at, err := m.Restored(ctx)
	if err != nil || note == "" {
		return err
	}
	if wait := time.Until(at.Add(c.providerTimeout)); wait > 0 {
		log.Info("restored database: waiting out the provider timeout before asking the provider", "wait", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	rec, err := payment.NewReconciler(payment.Reconciler{Service: a.service, StaleAfter: c.providerTimeout, Observe: observe})
	if err != nil {
		return err
	}
	var total payment.ReconcileResult
	for {
		res, err := rec.RunOnce(ctx)
		total.Checked, total.Succeeded, total.Failed = total.Checked+res.Checked, total.Succeeded+res.Succeeded, total.Failed+res.Failed
		total.Unknown, total.Skipped = total.Unknown+res.Unknown, total.Skipped+res.Skipped
		if err != nil {
			return fmt.Errorf("settle the restored database: %w", err)
		}
		if res.Checked < rec.Limit || res.Unknown > 0 { // done, or the provider cannot say now
			break
		}
	}
	if total.Unknown > 0 {
		log.Warn("restored database: the provider could not say what became of some attempts in progress; reconcile and their retries ask again, and the next start settles them before listening",
			"restored_from", note, "result", total.String())
		return nil
	}
	log.Info("restored database settled", "restored_from", note, "result", total.String())
	return m.ClearRestored(ctx)
}

// runRestore is "oncepay restore --from URL --to FILE [--at TIME]": the
// database a replica holds, written to a new file, checked, and marked so
// that serve settles what was in progress before it answers anyone.
func runRestore(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var from, to, at string
	fs := newFlagSet("restore", "restore --from URL --to FILE [--at RFC3339]", stderr)
	fs.StringVar(&from, "from", "", "the replica, as serve --replica named it: file:///path/to/dir or s3://bucket/path")
	fs.StringVar(&to, "to", "", "the database file to write; it must not exist")
	fs.StringVar(&at, "at", "", "restore the database as it stood at this time (RFC 3339, such as 2026-12-01T09:30:00Z), not its newest state")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if from == "" || to == "" {
		return errors.New("restore: --from URL and --to FILE are required")
	}
	if pgstore.IsURL(to) {
		return errors.New("restore: --to is a PostgreSQL URL; a replica restores to a SQLite file (then \"oncepay copy\" moves it to PostgreSQL)")
	}
	var atTime time.Time
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return fmt.Errorf("restore: --at %q: want RFC 3339, such as 2026-12-01T09:30:00Z", at)
		}
		atTime = t
		if age := time.Since(t); age > payment.ProviderKeyWindow {
			fmt.Fprintf(stderr, "oncepay: warning: --at is %s ago, past the provider's idempotency window (%s): a payment made after it and retried now reaches the provider as new, and is charged again\n", age.Round(time.Minute), payment.ProviderKeyWindow)
		}
	}
	for _, p := range []string{to, to + "-wal", to + "-shm"} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("restore: %s exists; restore refuses to overwrite a database: give a new --to, or move it aside", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restore: %w", err)
		}
	}
	// Written and checked beside the target, then linked into place: a
	// failure leaves nothing at --to, and a file that appeared meanwhile is
	// never overwritten.
	dir, err := os.MkdirTemp(filepath.Dir(to), ".oncepay-restore-")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(dir)
	staged := filepath.Join(dir, filepath.Base(to))
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := replica.Restore(ctx, from, staged, atTime, log)
	if err != nil {
		return err
	}
	upTo := res.UpTo.UTC().Format(time.RFC3339)
	db, err := sqlitestore.Open(ctx, staged, schema, sqlitestore.Options{})
	if err != nil {
		return fmt.Errorf("restore: open the restored database: %w", err)
	}
	note := fmt.Sprintf("%s up to %s (transaction %d)", replica.Redact(from), upTo, res.TXID)
	err = db.MarkRestored(ctx, note, time.Now())
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: mark the restored database: %w", err)
	}
	if fi, err := os.Stat(staged + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("restore: the restored database kept a write-ahead log after closing; nothing was written to %s", to)
	}
	if err := os.Link(staged, to); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if d, err := os.Open(filepath.Dir(to)); err == nil {
		d.Sync() // the new name survives a power cut
		d.Close()
	}
	fmt.Fprintf(stdout, "restored %s from %s: up to %s (transaction %d), integrity ok\n", to, replica.Redact(from), upTo, res.TXID)
	fmt.Fprintln(stdout, "serve on it settles the attempts it holds in progress, asking the provider, before it answers anyone")
	return nil
}
