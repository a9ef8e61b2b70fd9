package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/batchlog"
	"github.com/oncepay/oncepay/metrics"
	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/provider/link"
	"github.com/oncepay/oncepay/provider/remote"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/provider/stripe"
	"github.com/oncepay/oncepay/replica"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
	"github.com/oncepay/oncepay/workshop"
)

// config is what the commands are configured with; each command registers
// the flags it uses.
type config struct {
	addr              string
	db                string
	provider          string
	stripeURL         string
	stripeKey         string // only ever from STRIPE_SECRET_KEY, never a flag
	stripeWebhookKey  string // only ever from STRIPE_WEBHOOK_SECRET, never a flag
	simWebhookSecret  string
	demo              bool
	public            bool // demo on an address other than loopback
	serves            bool // serve or demo, not a one-shot command
	bulkLoad          bool // bench fill: sqlitestore.Options.BulkLoad
	simDB             string
	simFaults         sim.Faults
	simKeyWindow      time.Duration
	providerTimeout   time.Duration
	lease             time.Duration
	maxBatch          int
	batchWait         time.Duration
	replayCacheMB     int
	staleAfter        time.Duration
	retention         time.Duration
	paymentRetention  time.Duration
	eventRetention    time.Duration
	purgeBatchTime    time.Duration
	adminToken        string
	adminTokenFile    string
	reconcileSchedule string
	purgeSchedule     string
	sweepSchedule     string
	logLevel          slog.Level
	offline           offlineConfig
	replica           replicaConfig
	delivery          deliveryConfig
}

// offlineConfig configures the link to the provider and the forward queue
// of payments taken while it cannot be reached.
type offlineConfig struct {
	linkFailures    int
	linkOpenFor     time.Duration
	forwardSchedule string
}

func (o *offlineConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&o.linkFailures, "link-failures", link.DefaultFailures, "consecutive provider calls that could not complete before the link counts as down: new payments are then answered at once (queued, or 503) without a call, until a probe gets through; 0 turns the breaker off. Not used with the in-process simulated provider, which has no link")
	fs.DurationVar(&o.linkOpenFor, "link-probe", link.DefaultOpenFor, "how often the provider is probed while the link is down")
	fs.StringVar(&o.forwardSchedule, "forward-schedule", "@every 30s", "cron schedule of the forwarder, which sends queued payments to the provider (UTC), or off; it also runs as soon as a probe finds the link back")
}

func (o *offlineConfig) validate() error {
	if o.linkFailures < 0 {
		return fmt.Errorf("--link-failures %d must not be negative", o.linkFailures)
	}
	if o.linkOpenFor <= 0 {
		return fmt.Errorf("--link-probe %s must be positive", o.linkOpenFor)
	}
	return nil
}

// deliveryConfig configures the deliveries of merchants' events to their
// endpoints.
type deliveryConfig struct {
	schedule      string
	timeout       time.Duration
	backoff       backoffFlag
	parallel      int
	allowInsecure bool
}

func (d *deliveryConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&d.timeout, "delivery-timeout", payment.DefaultDeliveryTimeout, "longest wait for a merchant's endpoint to answer one delivery; past it the delivery is tried again later")
	d.backoff = backoffFlag(payment.DefaultDeliverySchedule)
	fs.Var(&d.backoff, "delivery-backoff", "waits before each try again of a delivery that failed, comma-separated (each within a tenth either way); past the last, it has failed for good. Short ones are for tests")
	fs.IntVar(&d.parallel, "delivery-parallel", payment.DefaultDeliveryParallel, "deliveries one deliverer run tries at once: more keep up with more payments (their writes share commits), fewer hold back less of the others when endpoints hang")
	fs.BoolVar(&d.allowInsecure, "allow-insecure-endpoints", false, "deliver events to http:// endpoints and to loopback, private and link-local addresses too: for tests on one machine, never on the internet (an endpoint's URL is its merchant's to choose)")
}

func (d *deliveryConfig) validate() error {
	if d.timeout <= 0 || d.timeout > 5*time.Minute {
		return fmt.Errorf("--delivery-timeout %s: want more than 0 and at most 5m", d.timeout)
	}
	if d.parallel < 1 || d.parallel > 1024 {
		return fmt.Errorf("--delivery-parallel %d: want 1 to 1024", d.parallel)
	}
	return d.backoff.validate()
}

// deliverer is the deliverer of db's events, logging to log.
func (d *deliveryConfig) deliverer(db payment.EndpointStore, log *slog.Logger) (*payment.Deliverer, error) {
	return payment.NewDeliverer(payment.Deliverer{Store: db, Log: log, Timeout: d.timeout, Schedule: d.backoff, Parallel: d.parallel,
		Sender: outbound.New(outbound.Options{AllowInsecure: d.allowInsecure, UserAgent: "oncepay/" + versionString()})})
}

// backoffFlag is --delivery-backoff: the waits before each try again of a
// failed delivery, comma-separated.
type backoffFlag []time.Duration

// maxBackoffTries bounds the schedule: a delivery owed for ever would
// hold its event from the purge for ever.
const maxBackoffTries = 50

func (b *backoffFlag) String() string {
	if b == nil {
		return ""
	}
	waits := make([]string, len(*b))
	for i, d := range *b {
		waits[i] = d.String()
	}
	return strings.Join(waits, ",")
}

func (b *backoffFlag) Set(s string) error {
	var waits []time.Duration
	for _, w := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(w))
		if err != nil {
			return err
		}
		waits = append(waits, d)
	}
	*b = waits
	return nil
}

func (b backoffFlag) validate() error {
	if len(b) == 0 || len(b) > maxBackoffTries {
		return fmt.Errorf("--delivery-backoff: %d waits, want 1 to %d", len(b), maxBackoffTries)
	}
	for _, d := range b {
		if d <= 0 || d > 7*24*time.Hour {
			return fmt.Errorf("--delivery-backoff: a wait of %s, want more than 0 and at most 168h", d)
		}
	}
	return nil
}

func (c *config) registerStore(fs *flag.FlagSet) {
	fs.StringVar(&c.db, "db", "oncepay.db", "SQLite database file, or a postgres:// URL for PostgreSQL (many instances, one database)")
}

func (c *config) registerWritePath(fs *flag.FlagSet) {
	fs.IntVar(&c.maxBatch, "max-batch", 256, "most writes committed together in one transaction (group commit); 1 commits each alone")
	fs.DurationVar(&c.batchWait, "batch-wait", 0, "how long the writer waits for more writes to join a batch (0: only those already waiting)")
	fs.IntVar(&c.replayCacheMB, "replay-cache-mb", 16, "memory (MiB) for the final answers replays are given, so a retry of a settled key reads no table; 0 keeps none")
}

func (c *config) registerProvider(fs *flag.FlagSet) {
	fs.StringVar(&c.provider, "provider", "sim", `payment provider: "sim" (simulated, in process), "stripe" (secret key from STRIPE_SECRET_KEY), or the URL of a running "oncepay sim-provider"`)
	fs.StringVar(&c.stripeURL, "stripe-url", "", `with --provider stripe: the API's base URL, for a test server such as stripe-mock (default Stripe's own)`)
	fs.StringVar(&c.simDB, "sim-db", "", `ledger file of the in-process simulated provider (default: the --db name with "-sim" added)`)
	registerFaults(fs, &c.simFaults)
	registerKeyWindow(fs, &c.simKeyWindow)
	fs.DurationVar(&c.providerTimeout, "provider-timeout", 10*time.Second, "longest wait for one provider call; past it the outcome is unknown (503)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long a request owns its claim before a retry may take it over; must exceed --provider-timeout")
	fs.DurationVar(&c.staleAfter, "stale-after", 5*time.Minute, "age after which reconcile settles an attempt still in progress with no live lease; must exceed --lease")
	c.offline.register(fs)
}

func (c *config) registerServe(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (loopback unless you say otherwise)")
	if c.demo {
		fs.BoolVar(&c.public, "public", false, "let demo listen on an --addr other than loopback, opening its admin page, ledger, fault knobs and payments without a key to the network")
	}
	fs.StringVar(&c.adminToken, "admin-token", "", "credential of the admin page and GET /v1/attempts (serve), at least 32 characters; empty keeps them closed. As a flag it shows in ps: prefer the environment variable or --admin-token-file")
	fs.StringVar(&c.adminTokenFile, "admin-token-file", "", "file holding the admin token, readable by its owner only (a systemd credential, say: $CREDENTIALS_DIRECTORY/admin-token); instead of --admin-token")
	c.registerRetention(fs)
	fs.StringVar(&c.reconcileSchedule, "reconcile-schedule", "@every 1m", "cron schedule of reconcile (UTC), or off")
	fs.StringVar(&c.purgeSchedule, "purge-schedule", "@every 10m", "cron schedule of purge (UTC), or off")
	fs.StringVar(&c.sweepSchedule, "webhook-sweep-schedule", "@every 1m", "cron schedule of the webhook inbox sweep (UTC), which applies events a dead processor left, or off")
	fs.StringVar(&c.delivery.schedule, "deliver-schedule", "@every 5s", "cron schedule of the deliverer, which sends merchants' events to their endpoints (UTC), or off")
	c.delivery.register(fs)
	fs.StringVar(&c.simWebhookSecret, "sim-webhook-secret", "", `secret ("whsec_" and a key in base64) of POST /v1/webhooks/sim, the simulated provider's signed events; with --provider sim it also makes the in-process provider send them (demo makes one up)`)
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
	c.replica.register(fs)
}

func (c *config) registerRetention(fs *flag.FlagSet) {
	fs.DurationVar(&c.retention, "retention", 24*time.Hour, "how long final attempts (and so their keys) are kept")
	fs.DurationVar(&c.paymentRetention, "payment-retention", 0, "how long payments and their refunds are kept after their keys, and merchants' events after they were made (0: always); at least --retention")
	fs.DurationVar(&c.purgeBatchTime, "purge-batch-time", payment.DefaultPurgeBatchTime, "how long one purge batch may hold the writer: the first is 64 rows, a quicker one doubles the next, a longer one halves it down to 64, a run starts where the last ended (negative: every batch the full 1,000)")
	fs.DurationVar(&c.eventRetention, "event-retention", payment.DefaultEventRetention, "how long final webhook events (processed, ignored) are kept; longer than the provider redelivers (Stripe: 3 days) answers a late copy as a duplicate")
}

func (c *config) validate() error {
	if err := c.offline.validate(); err != nil {
		return err
	}
	if c.demo && !c.public && !loopback(c.addr) {
		return fmt.Errorf("demo opens its admin page, the ledger, the fault knobs and payments without a key to anyone who can reach it, and --addr %s is not loopback: listen on 127.0.0.1, or give --public (ONCEPAY_PUBLIC=true) to open it to the network", c.addr)
	}
	if err := c.replica.validate(c.db); err != nil {
		return err
	}
	if c.delivery.timeout != 0 { // registered: serve, demo
		if err := c.delivery.validate(); err != nil {
			return err
		}
	}
	if c.lease <= c.providerTimeout {
		return fmt.Errorf("--lease (%s) must exceed --provider-timeout (%s): a retry must not take over a call still running", c.lease, c.providerTimeout)
	}
	if c.staleAfter < c.lease {
		return fmt.Errorf("--stale-after (%s) must be at least --lease (%s)", c.staleAfter, c.lease)
	}
	if c.simWebhookSecret != "" {
		if err := sim.CheckWebhookSecret(c.simWebhookSecret); err != nil {
			return fmt.Errorf("--sim-webhook-secret: %w", err)
		}
	}
	if c.stripeWebhookKey != "" && !strings.HasPrefix(c.stripeWebhookKey, "whsec_") {
		return errors.New(`STRIPE_WEBHOOK_SECRET: want the endpoint's signing secret, "whsec_..."`)
	}
	if c.paymentRetention != 0 && c.paymentRetention < c.retention {
		return fmt.Errorf("--payment-retention (%s) must be 0 (kept) or at least --retention (%s): a payment must outlive its key, or a late retry could charge again", c.paymentRetention, c.retention)
	}
	if c.simDB == "" {
		c.simDB = strings.TrimSuffix(c.db, ".db") + "-sim.db"
		if pgstore.IsURL(c.db) {
			c.simDB = "oncepay-sim.db"
		}
	}
	// A key oncepay forgot must not reach the provider as new: oncepay keeps
	// keys no longer than the provider does.
	if c.provider == "stripe" && c.retention > stripe.KeyWindow {
		return fmt.Errorf("--retention (%s) must not exceed Stripe's idempotency key window (%s): a retry after oncepay forgot its key would reach Stripe as a new payment", c.retention, stripe.KeyWindow)
	}
	return nil
}

// loopback reports whether addr is reachable from this machine only:
// 127.0.0.0/8, ::1 or localhost. An empty host (":8080") is every address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// openStripe makes the Stripe provider, refuses a key Stripe refuses, and
// says whether real money moves. The key appears in no log line or error.
func (c *config) openStripe(ctx context.Context, log *slog.Logger) (*stripe.Client, error) {
	if c.stripeKey == "" {
		return nil, errors.New("--provider stripe needs the secret key in STRIPE_SECRET_KEY (a test key first: sk_test_...)")
	}
	p, err := stripe.New(stripe.Config{SecretKey: c.stripeKey, URL: c.stripeURL, MaxNetworkRetries: stripe.DefaultMaxNetworkRetries})
	if err != nil {
		return nil, fmt.Errorf("STRIPE_SECRET_KEY: %w", err)
	}
	if p.Live() && c.demo {
		return nil, errors.New("demo refuses a live Stripe key: demo mode has no merchant authentication. Use a test key (sk_test_...)")
	}
	mode := "test"
	if p.Live() {
		mode = "live"
	}
	url := c.stripeURL
	if url == "" {
		url = "Stripe's API"
	}
	log.Info("stripe provider", "key_mode", mode, "url", url)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Check(cctx); errors.Is(err, payment.ErrProviderUnavailable) {
		return nil, fmt.Errorf("Stripe refuses STRIPE_SECRET_KEY (a wrong, revoked or too restricted key): %w", err)
	} else if err != nil {
		log.Warn("stripe: could not reach Stripe at start; payments answer 503 until it answers", "err", err)
	}
	return p, nil
}

// minAdminTokenLen is the shortest admin token serve accepts: 32 random
// characters cannot be guessed, even at many tries a second.
const minAdminTokenLen = 32

// readAdminToken reads the admin token from --admin-token-file, if given,
// trims it wherever it came from, and, for serve (strict), refuses one that
// is no secret: blank, too short (in characters, not bytes), or with
// whitespace or control characters inside, which a pasted line break or tab
// would leave and a browser's password field cannot send.
func (c *config) readAdminToken(strict bool) error {
	if c.adminTokenFile != "" {
		if c.adminToken != "" {
			return errors.New("--admin-token and --admin-token-file (or their ONCEPAY_ variables) are both set: give one")
		}
		b, err := readSecretFile(c.adminTokenFile)
		if err != nil {
			return fmt.Errorf("--admin-token-file: %w", err)
		}
		if c.adminToken = strings.TrimSpace(string(b)); c.adminToken == "" {
			return fmt.Errorf("--admin-token-file %s is empty", c.adminTokenFile)
		}
	}
	given := c.adminToken != ""
	c.adminToken = strings.TrimSpace(c.adminToken)
	if !strict || !given {
		return nil
	}
	const howTo = `make one with "head -c 32 /dev/urandom | base64"`
	if c.adminToken == "" {
		return errors.New("the admin token is blank: " + howTo)
	}
	for _, r := range c.adminToken {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("the admin token has whitespace or a control character (%U) inside: %s", r, howTo)
		}
	}
	if !utf8.ValidString(c.adminToken) {
		return errors.New("the admin token is not valid UTF-8: " + howTo)
	}
	if n := utf8.RuneCountInString(c.adminToken); n < minAdminTokenLen {
		return fmt.Errorf("the admin token is %d characters, want at least %d: %s", n, minAdminTokenLen, howTo)
	}
	return nil
}

// readSecretFile reads a file holding a secret, and refuses one that group
// or others may read, as oncepay's own files are its owner's only.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %04o: group or others have access to it; make it its owner's only: chmod 600 %s", path, perm, path)
	}
	return io.ReadAll(f)
}

// app is an open oncepay: its store, its provider, and the flow over them.
type app struct {
	db      payment.Database
	sim     *sim.Sim   // nil unless the provider is the in-process simulation
	link    *link.Link // nil without a link to guard (in-process simulation, --link-failures 0)
	linkUp  chan struct{}
	service *payment.Service
	replica *replica.Replicator // nil without --replica
}

// openStore opens the database --db names: PostgreSQL for a postgres://
// URL, else a SQLite file.
func (c *config) openStore(ctx context.Context) (payment.Database, error) {
	if pgstore.IsURL(c.db) {
		return pgstore.Open(ctx, c.db, pgstore.Options{ReplayCacheBytes: cacheBytes(c.replayCacheMB)})
	}
	// Only a server without a replica checkpoints the WAL. Litestream must be
	// the only checkpointer of a replicated file, and a one-shot command
	// cannot know whether the file it writes is replicated: its few pages are
	// checkpointed by the server's writer, or when the last connection closes.
	return sqlitestore.Open(ctx, c.db, schema, sqlitestore.Options{MaxBatch: c.maxBatch, MaxWait: c.batchWait,
		ReplayCacheBytes: cacheBytes(c.replayCacheMB), NoCheckpoint: !c.serves || c.replica.url != "", BulkLoad: c.bulkLoad})
}

// cacheBytes is --replay-cache-mb as the stores' option: negative for none.
func cacheBytes(mb int) int {
	if mb <= 0 {
		return -1
	}
	return mb << 20
}

// dbName is --db as logs and messages may show it: without a password.
func (c *config) dbName() string { return redactDB(c.db) }

func redactDB(db string) string {
	if !pgstore.IsURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

// open opens the store and the provider configured by c. The database is
// bound to its provider first, so a wrong one is refused before anything
// (an empty simulated ledger, say) is created.
func (c *config) open(ctx context.Context, log *slog.Logger) (*app, error) {
	sim := c.provider == "sim"
	if !sim && c.provider != "stripe" && !strings.HasPrefix(c.provider, "http://") && !strings.HasPrefix(c.provider, "https://") {
		return nil, fmt.Errorf(`--provider %q: want "sim", "stripe" or the http(s) URL of a running sim-provider`, c.provider)
	}
	var provider payment.Provider
	if c.provider == "stripe" {
		sp, err := c.openStripe(ctx, log)
		if err != nil {
			return nil, err
		}
		provider = sp
	}
	db, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	a := &app{db: db}
	warnNotIncremental(ctx, db, c.dbName(), log.Warn)
	if err := db.BindProvider(ctx, c.providerID()); err != nil {
		a.Close()
		return nil, err
	}
	if err := a.startReplica(c, log); err != nil {
		a.Close()
		return nil, err
	}
	if provider == nil {
		provider = remote.New(c.provider, c.providerTimeout)
	}
	if sim {
		if a.sim, err = openSim(c.simDB, c.simFaults, c.simKeyWindow); err != nil {
			a.Close()
			return nil, err
		}
		provider = a.sim
	}
	if !sim && c.offline.linkFailures > 0 {
		a.linkUp = make(chan struct{}, 1)
		a.link, err = link.New(provider, link.Config{Failures: c.offline.linkFailures, OpenFor: c.offline.linkOpenFor, Log: log,
			OnUp: func() {
				select {
				case a.linkUp <- struct{}{}:
				default: // a forward run is already due
				}
			}})
		if err != nil {
			a.Close()
			return nil, err
		}
		provider = a.link
	}
	a.service = &payment.Service{
		Store: db, Provider: provider, ProviderName: c.providerID(), Log: log, Now: time.Now,
		ProviderTimeout: c.providerTimeout, Lease: c.lease,
	}
	if a.link != nil {
		a.service.LinkDown = a.link.Down
	}
	return a, nil
}

// providerID names the provider for BindProvider. Stripe's test and live
// modes are different providers: neither knows the other's payments.
func (c *config) providerID() string {
	if c.provider == "sim" {
		return "sim"
	}
	if c.provider == "stripe" {
		id := "stripe"
		if live, _ := stripe.KeyMode(c.stripeKey); !live {
			id += " (test mode)"
		}
		if c.stripeURL != "" {
			id += " at " + c.stripeURL
		}
		return id
	}
	return strings.TrimSuffix(c.provider, "/")
}

func (a *app) Close() error {
	err := a.db.Close()
	if a.replica != nil {
		// After the store: what its last writes committed is shipped too.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = errors.Join(err, a.replica.Close(ctx))
		cancel()
	}
	if a.sim != nil {
		err = errors.Join(err, a.sim.Close())
	}
	return err
}

func (a *app) reconciler(c *config) (*payment.Reconciler, error) {
	return payment.NewReconciler(payment.Reconciler{Service: a.service, StaleAfter: c.staleAfter})
}

// keyWindow is how long the provider remembers an idempotency key: 0 when
// oncepay cannot know (a sim-provider at a URL keeps its own setting).
func (c *config) keyWindow() time.Duration {
	switch c.provider {
	case "sim":
		return c.simKeyWindow
	case "stripe":
		return stripe.KeyWindow
	}
	return 0
}

// checkOfflineWindow refuses to serve while a merchant's offline max age
// outlasts the provider's memory of keys: a payment forwarded after the
// provider forgot its key could be charged twice.
func (a *app) checkOfflineWindow(ctx context.Context, window time.Duration) error {
	if window <= 0 {
		return nil
	}
	all, err := a.db.AllOfflineLimits(ctx)
	if err != nil {
		return err
	}
	for scope, l := range all {
		if l.MaxAge > window {
			return fmt.Errorf("merchant %s takes payments offline for up to %s (--max-age), past the provider's idempotency window of %s: a payment forwarded after the provider forgot its key could be charged twice; lower it with oncepay merchant offline", scope, l.MaxAge, window)
		}
	}
	return nil
}

func (a *app) forwarder() (*payment.Forwarder, error) {
	return payment.NewForwarder(payment.Forwarder{Service: a.service})
}

// linkState is the link as the admin page shows it: "" without a link.
func (a *app) linkState() string {
	if a.link == nil {
		return ""
	}
	return a.link.State()
}

// linkUpFunc is the link's state for the metrics: nil without a link.
func (a *app) linkUpFunc() func() bool {
	if a.link == nil {
		return nil
	}
	return func() bool { return !a.link.Down() }
}

// forwardOnLinkUp runs the forwarder each time the link comes back, and
// probes the link while it is down, until ctx ends.
func (a *app) forwardOnLinkUp(ctx context.Context, log *slog.Logger, fwd *payment.Forwarder, c *config) {
	if a.link == nil {
		return
	}
	go a.link.Run(ctx, c.offline.linkOpenFor, c.providerTimeout)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.linkUp:
				logRun(ctx, log, "forward", fwd.RunOnce)
			}
		}
	}()
}

func newPurger(db payment.PurgeStore, c *config) (*payment.Purger, error) {
	if c.eventRetention <= 0 {
		return nil, fmt.Errorf("--event-retention (%s) must be positive", c.eventRetention)
	}
	p, err := payment.NewPurger(payment.Purger{Store: db, Retention: c.retention, PaymentRetention: c.paymentRetention, EventRetention: c.eventRetention, BatchTime: c.purgeBatchTime})
	if err != nil {
		return nil, fmt.Errorf("--retention: %w", err)
	}
	return p, nil
}

// runServe runs serve (merchant API keys required) or, with demo, the
// zero-config workshop mode.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, demo bool) error {
	name := "serve"
	if demo {
		name = "demo"
	}
	cfg := config{demo: demo, stripeKey: getenv("STRIPE_SECRET_KEY"), stripeWebhookKey: getenv("STRIPE_WEBHOOK_SECRET")}
	fs := newFlagSet(name, name+" [flags]", stderr)
	cfg.registerServe(fs)
	cfg.registerStore(fs)
	cfg.registerWritePath(fs)
	cfg.registerProvider(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if demo && cfg.simWebhookSecret == "" && cfg.provider == "sim" {
		cfg.simWebhookSecret = sim.NewWebhookSecret() // the whole loop, with no setup
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := cfg.readAdminToken(!demo); err != nil {
		return err
	}
	// A line per request: written in batches, not a system call each, and
	// each line waits up to 5 ms for others, so a busy server wakes the
	// log's goroutine once per batch, not once per line: +5-8% replays
	// (BENCHMARKS.md), no wait a person can see.
	logs := batchlog.New(stderr, 5*time.Millisecond)
	defer logs.Close()
	var handler slog.Handler = slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: cfg.logLevel})
	if demo {
		handler = slog.NewTextHandler(logs, &slog.HandlerOptions{Level: cfg.logLevel})
	}
	log := slog.New(handler)
	if processLog {
		defer routeStdLog(log)()
	}
	if demo && !loopback(cfg.addr) {
		log.Warn("DEMO ON THE NETWORK: anyone who can reach this address can open the admin page, read the ledger, set the fault knobs and make payments without a key", "addr", cfg.addr)
	}
	if sim.ShortWebhookSecret(cfg.simWebhookSecret) {
		log.Warn("--sim-webhook-secret: the key is shorter than 16 bytes; a longer one is harder to guess")
	}

	cfg.serves = true
	a, err := cfg.open(ctx, log)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.checkOfflineWindow(ctx, cfg.keyWindow()); err != nil {
		return err
	}
	m := metrics.New(a.db.InProgress, time.Now)
	m.Store(a.db)
	cfg.replica.warn(log, payment.ProviderKeyWindow)
	a.service.ObserveProviderCall = m.ProviderCall
	srvCfg := server.Config{Payments: a.service, Log: log, Metrics: m.Handler(), CountRequest: m.Request, CountRefund: m.Refund}
	if a.replica != nil {
		m.Replica(a.replicaStatus)
		srvCfg.Replica = a.replicaHealth(cfg.replica.maxLag)
	}
	if a.sim != nil {
		srvCfg.Sim = a.sim.Handler()
		if !demo {
			log.Warn("SIMULATED PROVIDER: no real money moves. Set --provider for a real one.", "ledger", cfg.simDB)
		}
	}
	inbox := payment.NewInbox(a.db, a.service, cfg.webhookEndpoint(), cfg.lease)
	inbox.Observe, inbox.Refused = m.WebhookEvent, m.WebhookRefused
	srvCfg.Inbox, srvCfg.Webhooks, srvCfg.CountWebhook = inbox, cfg.webhooks(), m.WebhookEvent
	rec, err := a.reconciler(&cfg)
	if err != nil {
		return err
	}
	pur, err := newPurger(a.db, &cfg)
	if err != nil {
		return err
	}
	fwd, err := a.forwarder()
	if err != nil {
		return err
	}
	dlv, err := cfg.delivery.deliverer(a.db, log)
	if err != nil {
		return err
	}
	rec.Observe, pur.Observe, fwd.Observe, dlv.Observe = m.Reconciled, m.Purged, m.Forwarded, m.Delivered
	m.Deliveries(a.db.DeliveryBacklog, time.Now)
	m.Offline(a.db.QueueTotals, a.linkUpFunc(), time.Now)
	a.service.ObserveQueue = m.Queued
	srvCfg.Admin = server.Admin{Store: a.db, Reconciler: rec, Queue: a.db, Forwarder: fwd, Link: a.linkState, Endpoints: a.db, Deliverer: dlv,
		Token: cfg.adminToken, Open: demo}
	if demo && a.sim != nil {
		srvCfg.Workshop = workshop.New(workshop.Config{Service: a.service, Reconciler: rec, Inbox: inbox, Forwarder: fwd, Ledger: a.sim, Scope: server.DemoScope})
	}
	if !demo {
		srvCfg.Keys = a.db
		if cfg.adminToken == "" {
			log.Info("admin page closed: set ONCEPAY_ADMIN_TOKEN or --admin-token-file to open /admin and GET /v1/attempts")
		}
	}

	// A database restored from its replica answers nobody until what it
	// held in progress is settled.
	if err := settleRestored(ctx, a, &cfg, log, m.Reconciled); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	jobs, err := startJobs(ctx, log, &cfg, rec, pur, inbox, fwd, dlv)
	if err != nil {
		ln.Close()
		return err
	}
	jobCtx, stopJobs := context.WithCancel(ctx)
	defer stopJobs()
	a.forwardOnLinkUp(jobCtx, log, fwd, &cfg)
	url := "http://" + ln.Addr().String()
	if a.sim != nil && cfg.simWebhookSecret != "" {
		// The in-process provider signs its events and sends them here.
		if err := a.sim.SetWebhook(sim.WebhookConfig{URL: url + "/v1/webhooks/sim", Secret: cfg.simWebhookSecret}); err != nil {
			ln.Close()
			return err
		}
	}
	if demo {
		fmt.Fprintf(stdout, "oncepay demo: %s (simulated provider, no API key needed)\nworkshop page: %s/demo\nadmin page: %s/admin\n", url, url, url)
	}
	log.Info("listening", "url", url, "mode", name, "db", cfg.dbName())
	err = serveHTTP(ctx, ln, server.New(srvCfg), cfg.providerTimeout, log)
	<-jobs.Stop().Done() // then the deferred Close: the database goes last
	return err
}

// webhookEndpoint is the webhook endpoint of the provider payments go to:
// only its events settle them. A sim-provider elsewhere signs as the
// simulated provider does.
func (c *config) webhookEndpoint() string {
	if c.provider == "stripe" {
		return "stripe"
	}
	return "sim"
}

// webhooks are the verifiers of the webhook endpoints configured: each
// provider's only with its secret.
func (c *config) webhooks() map[string]server.WebhookVerifier {
	v := map[string]server.WebhookVerifier{}
	if key := c.stripeWebhookKey; key != "" {
		v["stripe"] = func(h http.Header, body []byte) (payment.Event, error) {
			return stripe.VerifyWebhook(key, h.Get("Stripe-Signature"), body)
		}
	}
	if secret := c.simWebhookSecret; secret != "" {
		v["sim"] = func(h http.Header, body []byte) (payment.Event, error) {
			return sim.VerifyWebhook(secret, h, body, time.Now())
		}
	}
	return v
}

func openSim(path string, faults sim.Faults, window time.Duration) (*sim.Sim, error) {
	s, err := sim.Open(path)
	if err != nil {
		return nil, err
	}
	s.SetKeyWindow(window)
	if err := s.SetFaults(faults); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// maxHeaderBytes bounds a request's line and headers together: past it Go's
// server answers 431 before oncepay sees the request.
const maxHeaderBytes = 16 << 10

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully:
// requests in flight (a provider call among them) get to finish.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, providerTimeout time.Duration, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      providerTimeout + 15*time.Second, // a write follows the provider call
		IdleTimeout:       2 * time.Minute,
		// net/http reads 4096 bytes past MaxHeaderBytes before it answers
		// 431: this makes maxHeaderBytes the limit a client meets.
		MaxHeaderBytes: maxHeaderBytes - 4096,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), providerTimeout+5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
