// Package replica copies oncepay's SQLite file, as it is written, to a
// replica (a directory, or a bucket of S3 or an S3-compatible store), and
// restores it on another machine. It embeds Litestream and is the only
// package that speaks to it.
//
// Litestream must be the only checkpointer of the file it replicates: it
// reads the WAL after oncepay commits to it and copies the frames before
// they are moved into the database file. So the writer of a replicated
// file opens with wal_autocheckpoint(0) (sqlitestore.Options.NoCheckpoint),
// and Litestream, holding a read transaction between its syncs, checkpoints
// after it has copied what the WAL holds.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/litestream"
	_ "github.com/benbjohnson/litestream/file" // file:// replicas
	_ "github.com/benbjohnson/litestream/s3"   // s3:// replicas
)

// Defaults of Config, as docs/replication.md documents them.
const (
	DefaultSyncInterval = time.Second
	DefaultRetention    = 24 * time.Hour
)

// BusyTimeout is how long a sync waits for the SQLite write lock: the wait
// oncepay's own writer allows (sqlitestore.Options.BusyTimeout).
const BusyTimeout = 5 * time.Second

// Config says where and how often one SQLite file is replicated.
type Config struct {
	// URL is the replica: file:///path/to/dir or s3://bucket/path (S3's
	// credentials, region and endpoint from the usual AWS_* environment
	// variables).
	URL string
	// SyncInterval is how often new writes are shipped to the replica: in
	// steady state the replica is at most about this far behind. Default 1s.
	SyncInterval time.Duration
	// Retention is how long the replica keeps its history: how far back a
	// restore to a point in time can reach. A full snapshot is written as
	// often. Default 24h.
	Retention time.Duration
	// Log receives what replication logs. Default slog.Default().
	Log *slog.Logger
}

// Validate checks the configuration, URL first.
func (c *Config) Validate() error {
	if err := CheckURL(c.URL); err != nil {
		return err
	}
	if c.SyncInterval < 0 {
		return fmt.Errorf("sync interval %s must not be negative", c.SyncInterval)
	}
	if c.Retention < 0 {
		return fmt.Errorf("retention %s must not be negative", c.Retention)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// CheckURL refuses a replica URL that names no replica this build can
// write: file:///path or s3://bucket/path.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("replica URL: %w", err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" || u.Host != "" {
			return fmt.Errorf("replica URL %q: want file:///absolute/path/to/a/directory", raw)
		}
	case "s3":
		if u.Host == "" {
			return fmt.Errorf("replica URL %q: want s3://bucket/path", raw)
		}
	default:
		return fmt.Errorf("replica URL %q: want file:///path or s3://bucket/path", raw)
	}
	return nil
}

// Redact is the URL as logs may show it: without a password.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// client makes the Litestream client of a replica URL. An s3:// URL takes
// the region and endpoint the AWS SDKs read from the environment
// (AWS_REGION, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) unless the URL's
// query sets them; the credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, or the SDK's usual chain.
func client(raw string) (litestream.ReplicaClient, error) {
	if err := CheckURL(raw); err != nil {
		return nil, err
	}
	u, _ := url.Parse(raw)
	if u.Scheme == "s3" {
		q := u.Query()
		if q.Get("region") == "" {
			if r := cmpEnv("AWS_REGION", "AWS_DEFAULT_REGION"); r != "" {
				q.Set("region", r)
			}
		}
		if q.Get("endpoint") == "" {
			if e := cmpEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"); e != "" {
				q.Set("endpoint", e)
			}
		}
		u.RawQuery = q.Encode()
		raw = u.String()
	}
	c, err := litestream.NewReplicaClientFromURL(raw)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", Redact(raw), err)
	}
	return c, nil
}

// cmpEnv is the first of the environment variables that is set.
func cmpEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Replicator ships one SQLite file's writes to its replica until Close.
type Replicator struct {
	cfg     Config
	db      *litestream.DB
	store   *litestream.Store
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu sync.Mutex
	// through: every write committed before it is in the replica (the
	// start of the last sync that left the replica holding the whole WAL).
	through  time.Time
	lastSync time.Time // when that sync ended
	errors   atomic.Int64
}

// Status is where the replica stands.
type Status struct {
	// Through is the time before which every committed write is in the
	// replica; zero until the first sync since start.
	Through time.Time
	// LastSync is when the last successful sync ended; zero before it.
	LastSync time.Time
	// Errors counts the syncs that failed since start.
	Errors int64
	// Lag is how far behind the replica is at the time Status was read:
	// what a machine lost now would lose, at most.
	Lag time.Duration
}

// Start begins replicating the SQLite file at path, which oncepay has
// opened already (in WAL mode, its writer never checkpointing). The first
// sync runs at once; Start does not wait for it.
func Start(path string, cfg Config) (*Replicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c, err := client(cfg.URL)
	if err != nil {
		return nil, err
	}
	db := litestream.NewDB(path)
	// Litestream writes to the file too (its bookkeeping tables, the barrier
	// of each checkpoint), so it waits for oncepay's writer as long as that
	// writer waits for others; its default second failed syncs under load.
	db.BusyTimeout = BusyTimeout
	// oncepay drives both steps itself (WAL to local LTX files, those to the
	// replica), one after the other, so it knows how far the replica has got.
	db.MonitorInterval = 0
	r := litestream.NewReplicaWithClient(db, c)
	r.MonitorEnabled = false
	db.Replica = r
	store := litestream.NewStore([]*litestream.DB{db}, litestream.DefaultCompactionLevels)
	store.SnapshotInterval = cfg.Retention
	store.SnapshotRetention = cfg.Retention
	store.ShutdownSyncTimeout = 10 * time.Second
	store.Logger = cfg.Log.With("subsystem", "replica")
	db.SetLogger(store.Logger)
	db.ShutdownSyncTimeout = store.ShutdownSyncTimeout
	ctx, cancel := context.WithCancel(context.Background())
	if err := store.Open(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("replica %s: %w", Redact(cfg.URL), err)
	}
	rep := &Replicator{cfg: cfg, db: db, store: store, started: time.Now(), cancel: cancel, done: make(chan struct{})}
	go rep.run(ctx)
	return rep, nil
}

// run syncs every SyncInterval until ctx ends.
func (rep *Replicator) run(ctx context.Context) {
	defer close(rep.done)
	t := time.NewTicker(rep.cfg.SyncInterval)
	defer t.Stop()
	var lastLogged time.Time
	for {
		if err := rep.Sync(ctx); err != nil && ctx.Err() == nil {
			// Every failure is counted; one line a minute is enough to read.
			if time.Since(lastLogged) >= time.Minute {
				rep.cfg.Log.Error("replica: sync failed; the replica falls behind until one succeeds",
					"replica", Redact(rep.cfg.URL), "err", err, "failures", rep.errors.Load())
				lastLogged = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync ships every write committed so far to the replica now.
func (rep *Replicator) Sync(ctx context.Context) error {
	start := time.Now()
	err := rep.db.Sync(ctx) // the WAL, read to its end, into local LTX files
	if err == nil {
		err = rep.db.Replica.Sync(ctx) // those files to the replica
	}
	if err != nil {
		rep.errors.Add(1)
		return err
	}
	rep.mu.Lock()
	rep.through, rep.lastSync = start, time.Now()
	rep.mu.Unlock()
	return nil
}

// Status reports where the replica stands now.
func (rep *Replicator) Status() Status {
	rep.mu.Lock()
	s := Status{Through: rep.through, LastSync: rep.lastSync, Errors: rep.errors.Load()}
	rep.mu.Unlock()
	since := s.Through
	if since.IsZero() {
		since = rep.started // nothing is known to be in the replica yet
	}
	s.Lag = time.Since(since)
	return s
}

// Close stops the sync loop, ships what is left (trying for up to 10s),
// and lets go of the file. oncepay closes its own connections first.
func (rep *Replicator) Close(ctx context.Context) error {
	rep.cancel()
	<-rep.done
	return rep.store.Close(ctx)
}

// Restored is what Restore wrote.
type Restored struct {
	// TXID is the replica's transaction the file holds everything up to.
	TXID uint64
	// UpTo is when the replica received that transaction.
	UpTo time.Time
}

// ErrNoReplica is returned by Restore when the URL holds no replica.
var ErrNoReplica = errors.New("no replica there")

// Restore writes the database the replica at url holds, as it stood at at
// (zero: its newest state), to the new file to, which must not exist, and
// checks its integrity (PRAGMA integrity_check). On any failure to is not
// left behind.
func Restore(ctx context.Context, url, to string, at time.Time, log *slog.Logger) (Restored, error) {
	if log == nil {
		log = slog.Default()
	}
	c, err := client(url)
	if err != nil {
		return Restored{}, err
	}
	c.SetLogger(log)
	if err := c.Init(ctx); err != nil {
		return Restored{}, fmt.Errorf("replica %s: %w", Redact(url), err)
	}
	r := litestream.NewReplicaWithClient(nil, c)
	opt := litestream.NewRestoreOptions()
	opt.OutputPath = to
	opt.Timestamp = at
	opt.IntegrityCheck = litestream.IntegrityCheckFull
	plan, err := litestream.CalcRestorePlan(ctx, c, 0, at, log)
	switch {
	case errors.Is(err, litestream.ErrTxNotAvailable), errors.Is(err, litestream.ErrNoSnapshots):
		if at.IsZero() {
			return Restored{}, fmt.Errorf("%s: %w", Redact(url), ErrNoReplica)
		}
		return Restored{}, fmt.Errorf("%s holds nothing as early as %s: %w", Redact(url), at.UTC().Format(time.RFC3339), err)
	case err != nil:
		return Restored{}, fmt.Errorf("replica %s: %w", Redact(url), err)
	case len(plan) == 0:
		return Restored{}, fmt.Errorf("%s: %w", Redact(url), ErrNoReplica)
	}
	last := plan[len(plan)-1]
	opt.TXID = last.MaxTXID // exactly the plan read above, even if the replica moves on meanwhile
	opt.Timestamp = time.Time{}
	if err := r.Restore(ctx, opt); err != nil {
		return Restored{}, fmt.Errorf("restore from %s: %w", Redact(url), err)
	}
	return Restored{TXID: uint64(last.MaxTXID), UpTo: last.CreatedAt}, nil
}

// IsURL reports whether s looks like a replica URL rather than a path.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "file://") || strings.HasPrefix(s, "s3://")
}
