package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/sqlitestore"
)

// storeCommand parses a store subcommand's flags (the store's and those
// register adds) and runs do on the open store with the subcommand and its
// positional arguments.
func storeCommand(ctx context.Context, name, synopsis string, args []string, getenv func(string) string, stderr io.Writer,
	register func(*flag.FlagSet), do func(db payment.Database, sub string, pos []string) error) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: oncepay %s", synopsis)
	}
	sub, args := args[0], args[1:]
	var cfg config
	fs := newFlagSet(name+" "+sub, synopsis, stderr)
	cfg.registerStore(fs)
	register(fs)
	if strings.HasPrefix(sub, "-") {
		// No subcommand first: --help lists the flags, anything else is a
		// usage error, and neither opens (or creates) a database.
		if _, err := parseFlags(fs, append([]string{sub}, args...), getenv); err != nil {
			return err
		}
		return fmt.Errorf("usage: oncepay %s", synopsis)
	}
	pos, err := parseFlags(fs, args, getenv)
	if err != nil {
		return err
	}
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	return do(db, sub, pos)
}

// runMerchant manages merchants: create prints the new id alone on the last
// line of stdout, so a script can take it with tail -n 1; offline sets the
// limits of payments taken while the provider cannot be reached.
func runMerchant(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const synopsis = "merchant create NAME | list | offline ID --max-amount MINOR --max-total MINOR --max-age DURATION | offline ID --disable [--db FILE|URL]"
	var (
		lim     payment.OfflineLimits
		disable bool
		window  time.Duration
	)
	register := func(fs *flag.FlagSet) {
		fs.Int64Var(&lim.MaxAmount, "max-amount", 0, "offline: the largest payment taken offline, in minor units of any one currency")
		fs.Int64Var(&lim.MaxTotal, "max-total", 0, "offline: the most taken offline and not yet forwarded, in minor units, in each currency")
		fs.DurationVar(&lim.MaxAge, "max-age", 0, "offline: how long a payment taken offline may wait for the provider; past it, it expires uncharged (at most the provider's idempotency window, 24h)")
		fs.BoolVar(&disable, "disable", false, "offline: take no payments offline (the default)")
		fs.DurationVar(&window, "provider-window", payment.ProviderKeyWindow, "offline: how long the provider remembers an idempotency key (Stripe and the simulated provider's default: 24h); --max-age may not pass it")
	}
	return storeCommand(ctx, "merchant", synopsis, args, getenv, stderr, register, func(db payment.Database, sub string, pos []string) error {
		switch {
		case sub == "create" && len(pos) == 1:
			m, err := db.CreateMerchant(ctx, pos[0], time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "created merchant %s (%s); make its API keys with oncepay apikey create --merchant %s\n%s\n", m.ID, m.Name, m.ID, m.ID)
			return nil
		case sub == "list" && len(pos) == 0:
			return listMerchants(ctx, db, stdout)
		case sub == "offline" && len(pos) == 1:
			return setOffline(ctx, db, pos[0], lim, disable, window, stdout)
		}
		return errors.New("usage: oncepay " + synopsis)
	})
}

// listMerchants prints every merchant with its live keys and offline limits.
func listMerchants(ctx context.Context, db payment.Database, stdout io.Writer) error {
	merchants, err := db.Merchants(ctx)
	if err != nil {
		return err
	}
	limits, err := db.AllOfflineLimits(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-22s %-24s %-20s %-9s %s\n", "ID", "NAME", "CREATED", "LIVE KEYS", "OFFLINE (max amount / max total / max age)")
	for _, m := range merchants {
		offline := "off"
		if l, ok := limits[m.ID]; ok {
			offline = fmt.Sprintf("%d / %d / %s", l.MaxAmount, l.MaxTotal, l.MaxAge)
		}
		fmt.Fprintf(stdout, "%-22s %-24s %-20s %-9d %s\n", m.ID, m.Name, m.CreatedAt.Format(time.RFC3339), m.LiveKeys, offline)
	}
	return nil
}

// setOffline sets (or, with disable, removes) a merchant's offline limits.
// The max age may not pass the provider's idempotency window: a payment
// forwarded after the provider forgot its key could be charged twice.
func setOffline(ctx context.Context, db payment.Database, id string, lim payment.OfflineLimits, disable bool, window time.Duration, stdout io.Writer) error {
	merchants, err := db.Merchants(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(merchants, func(m payment.Merchant) bool { return m.ID == id }) {
		return payment.ErrNoMerchant(id)
	}
	if disable {
		if lim != (payment.OfflineLimits{}) {
			return errors.New("merchant offline: --disable takes no limits")
		}
		if err := db.SetOfflineLimits(ctx, id, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "merchant %s takes no payments offline; payments already queued are still forwarded\n", id)
		return nil
	}
	if err := lim.Validate(window); err != nil {
		return fmt.Errorf("merchant offline: %w", err)
	}
	if err := db.SetOfflineLimits(ctx, id, &lim); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "merchant %s takes payments offline: at most %d each and %d queued per currency, each forwarded within %s or expired\n",
		id, lim.MaxAmount, lim.MaxTotal, lim.MaxAge)
	return nil
}

// runAPIKey manages merchant API keys: create prints the secret once, alone
// on the last line of stdout, so a script can take it with tail -n 1.
// "apikey create NAME", the form from before merchants, makes a merchant
// NAME with one key.
func runAPIKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const synopsis = "apikey create --merchant ID [--name NAME] | create NAME | list | revoke ID [--db FILE|URL]"
	var merchant, name string
	register := func(fs *flag.FlagSet) {
		fs.StringVar(&merchant, "merchant", "", "create: the merchant the key belongs to")
		fs.StringVar(&name, "name", "", "create: a name for the key, such as where it is deployed")
	}
	return storeCommand(ctx, "apikey", synopsis, args, getenv, stderr, register, func(db payment.Database, sub string, pos []string) error {
		switch {
		case sub == "create" && merchant == "" && len(pos) == 1:
			if err := warnSameName(ctx, db, pos[0], stderr); err != nil {
				return err
			}
			m, err := db.CreateMerchant(ctx, pos[0], time.Now())
			if err != nil {
				return err
			}
			merchant = m.ID
			if name == "" {
				name = pos[0]
			}
			fallthrough
		case sub == "create" && merchant != "" && len(pos) == 0:
			if name == "" {
				name = "default"
			}
			k, secret, err := db.CreateAPIKey(ctx, merchant, name, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "created API key %s (%s) of merchant %s; its secret is shown once, below:\n%s\n", k.ID, k.Name, k.MerchantID, secret)
			return nil
		case sub == "list" && len(pos) == 0:
			keys, err := db.APIKeys(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%-22s %-22s %-24s %-20s %s\n", "ID", "MERCHANT", "NAME", "CREATED", "REVOKED")
			for _, k := range keys {
				revoked := "-"
				if !k.RevokedAt.IsZero() {
					revoked = k.RevokedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(stdout, "%-22s %-22s %-24s %-20s %s\n", k.ID, k.MerchantID, k.Name, k.CreatedAt.Format(time.RFC3339), revoked)
			}
			return nil
		case sub == "revoke" && len(pos) == 1:
			if err := db.RevokeAPIKey(ctx, pos[0], time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "revoked %s\n", pos[0])
			return nil
		}
		return errors.New("usage: oncepay " + synopsis)
	})
}

// runEndpoint manages where merchants are sent their events: add prints
// the signing secret once, alone on the last line of stdout, as
// rotate-secret prints the new one.
func runEndpoint(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const synopsis = "endpoint add --merchant ID --url URL [--events TYPES] | list [--merchant ID] | disable ID | rotate-secret ID [--db FILE|URL]"
	var (
		merchant, rawURL, events string
		insecure                 bool
	)
	register := func(fs *flag.FlagSet) {
		fs.StringVar(&merchant, "merchant", "", "add, list: the merchant whose events go there")
		fs.StringVar(&rawURL, "url", "", "add: the endpoint's https:// URL")
		fs.StringVar(&events, "events", "", "add: the event types sent there, comma-separated (default all): "+payment.EventTypeNames())
		fs.BoolVar(&insecure, "allow-insecure-endpoints", false, "add: accept an http:// URL, for tests on one machine (serve must be given the flag too)")
	}
	return storeCommand(ctx, "endpoint", synopsis, args, getenv, stderr, register, func(db payment.Database, sub string, pos []string) error {
		now := time.Now()
		switch {
		case sub == "add" && len(pos) == 0 && merchant != "" && rawURL != "":
			types, err := payment.ParseEventTypes(events)
			if err != nil {
				return fmt.Errorf("endpoint add: --events: %w", err)
			}
			e, err := payment.NewEndpoint(merchant, rawURL, types, insecure, now)
			if err != nil {
				return fmt.Errorf("endpoint add: --url: %s", payment.ErrorMessage(err))
			}
			if err := db.CreateEndpoint(ctx, e); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "created endpoint %s of merchant %s at %s (%s); verify its deliveries with the signing secret, shown once, below:\n%s\n",
				e.ID, e.Scope, e.URL, typesOf(e), e.Secret)
			return nil
		case sub == "list" && len(pos) == 0:
			es, err := db.Endpoints(ctx, merchant)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%-22s %-22s %-40s %-20s %s\n", "ID", "MERCHANT", "URL", "EVENTS", "STATE")
			for _, e := range es {
				fmt.Fprintf(stdout, "%-22s %-22s %-40s %-20s %s\n", e.ID, e.Scope, e.URL, typesOf(e), endpointState(e))
			}
			return nil
		case sub == "disable" && len(pos) == 1:
			if err := db.DisableEndpoint(ctx, pos[0], "disabled by an operator", now); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "disabled %s: no event is sent there again, and those not yet delivered are not\n", pos[0])
			return nil
		case sub == "rotate-secret" && len(pos) == 1:
			secret, until := payment.NewEndpointSecret(), now.Add(payment.SecretPreviousFor)
			if err := db.RotateEndpointSecret(ctx, pos[0], secret, until); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "rotated the secret of %s; the old one signs deliveries too until %s. The new one, shown once:\n%s\n",
				pos[0], until.UTC().Format(time.RFC3339), secret)
			return nil
		}
		return errors.New("usage: oncepay " + synopsis)
	})
}

// typesOf names the event types e is sent.
func typesOf(e payment.Endpoint) string {
	if len(e.Types) == 0 {
		return "all events"
	}
	s := make([]string, len(e.Types))
	for i, t := range e.Types {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

// endpointState says whether e is sent events, and how its last ones went.
func endpointState(e payment.Endpoint) string {
	switch {
	case !e.Enabled():
		return "disabled " + e.DisabledAt.Format(time.RFC3339) + ": " + e.DisabledReason
	case !e.FailingSince.IsZero():
		return "enabled, failing since " + e.FailingSince.Format(time.RFC3339)
	}
	return "enabled"
}

// warnSameName warns that "apikey create NAME" makes a new merchant even if
// one is named NAME already: a rotated key made that way would not share the
// old key's payments, the very mistake merchants exist to prevent.
func warnSameName(ctx context.Context, db payment.AccountStore, name string, stderr io.Writer) error {
	merchants, err := db.Merchants(ctx)
	if err != nil {
		return err
	}
	for _, m := range merchants {
		if m.Name == name {
			fmt.Fprintf(stderr, "oncepay: merchant %s is also named %q; this makes a new merchant whose key shares none of its payments.\n"+
				"To rotate a key of %s instead: oncepay apikey create --merchant %s\n", m.ID, name, m.ID, m.ID)
		}
	}
	return nil
}

// runBackup is "oncepay backup --to FILE": a consistent copy of the live
// database, taken while oncepay runs, with no sqlite3 tool needed.
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		cfg config
		to  string
	)
	fs := newFlagSet("backup", "backup --to FILE [--db FILE]", stderr)
	cfg.registerStore(fs)
	fs.StringVar(&to, "to", "", "the backup file to write; it must not exist")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if to == "" {
		return errors.New("backup: --to FILE is required")
	}
	if pgstore.IsURL(cfg.db) {
		return errors.New("backup: --db is PostgreSQL, which oncepay does not copy itself: use pg_dump (pg_dump --format=custom --file FILE URL), or your provider's backups and point-in-time recovery")
	}
	db, err := sqlitestore.Open(ctx, cfg.db, schema, sqlitestore.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Backup(ctx, to); err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", cfg.db, to)
	return nil
}

// runCopy is "oncepay copy --from FILE --to URL": a SQLite installation
// moved to an empty PostgreSQL database, in-flight attempts included (with
// their fences and leases, so a client's retry takes them over there), with
// its merchants, API keys (hashes: every secret keeps working) and the
// provider binding. It reads one consistent snapshot and writes it in one
// transaction: the target has all of it or none.
func runCopy(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var from, to string
	fs := newFlagSet("copy", "copy --from FILE --to URL", stderr)
	fs.StringVar(&from, "from", "", "the SQLite database to copy, such as oncepay.db")
	fs.StringVar(&to, "to", "", "the PostgreSQL database to copy into (postgres://...); it must hold no payments, merchants or keys")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if from == "" || to == "" {
		return errors.New("copy: --from FILE and --to URL are both required")
	}
	if pgstore.IsURL(from) || !pgstore.IsURL(to) {
		return errors.New("copy: --from is a SQLite file and --to a postgres:// URL")
	}
	if _, err := os.Stat(from); err != nil { // never create an empty source
		return fmt.Errorf("copy: --from: %w", err)
	}
	src, err := sqlitestore.Open(ctx, from, schema, sqlitestore.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	snap, err := src.Export(ctx)
	if err != nil {
		return fmt.Errorf("copy: read %s: %w", from, err)
	}
	dst, err := pgstore.Open(ctx, to, pgstore.Options{})
	if err != nil {
		return err
	}
	defer dst.Close()
	if err := dst.Import(ctx, snap); err != nil {
		return fmt.Errorf("copy: write %s: %w", redactDB(to), err)
	}
	inProgress := 0
	for _, a := range snap.Attempts {
		if a.Status == payment.InProgress {
			inProgress++
		}
	}
	fmt.Fprintf(stdout, "copied %s to %s: %d attempts (%d in progress), %d payments, %d refunds, %d webhook events, %d merchants, %d API keys, %d settings, %d merchant events, %d endpoints, %d deliveries\n",
		from, redactDB(to), len(snap.Attempts), inProgress, len(snap.Payments), len(snap.Refunds), len(snap.Events),
		len(snap.Merchants), len(snap.APIKeys), len(snap.Settings), len(snap.Outbox), len(snap.Endpoints), len(snap.Deliveries))
	return nil
}
