package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// runSimProvider runs the simulated provider as its own HTTP server, so the
// faults it injects cross a real socket.
func runSimProvider(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var (
		addr, db             string
		faults               sim.Faults
		window               time.Duration
		webhookURL, whSecret string
	)
	fs := newFlagSet("sim-provider", "sim-provider [flags]", stderr)
	fs.StringVar(&addr, "addr", "127.0.0.1:8090", "address to listen on")
	fs.StringVar(&db, "db", "oncepay-sim.db", "the simulated provider's ledger file")
	registerFaults(fs, &faults)
	registerKeyWindow(fs, &window)
	fs.StringVar(&webhookURL, "webhook-url", "", "where to send signed events of every charge and decline, e.g. http://127.0.0.1:8080/v1/webhooks/sim (empty: none)")
	fs.StringVar(&whSecret, "webhook-secret", "", `the events' signing secret, "whsec_...": oncepay serve's --sim-webhook-secret`)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	s, err := openSim(db, faults, window)
	if err != nil {
		return err
	}
	defer s.Close()
	if webhookURL != "" {
		if err := s.SetWebhook(sim.WebhookConfig{URL: webhookURL, Secret: whSecret}); err != nil {
			return fmt.Errorf("--webhook-url: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if processLog {
		defer routeStdLog(log)()
	}
	log.Info("simulated provider listening", "url", "http://"+ln.Addr().String(), "ledger", db)
	return serveHTTP(ctx, ln, s.Handler(), 5*time.Second, log)
}

// registerFaults registers the --sim-* fault flags.
func registerFaults(fs *flag.FlagSet, f *sim.Faults) {
	fs.DurationVar(&f.Latency, "sim-latency", 0, "simulated provider: delay before every call")
	fs.Float64Var(&f.FailBeforeCharge, "sim-fail-before-charge", 0, "simulated provider: probability (0..1) a charge fails before charging")
	fs.Float64Var(&f.FailAfterCharge, "sim-fail-after-charge", 0, "simulated provider: probability (0..1) a charge's response is lost after charging")
	fs.Var(dedupeFlag{f}, "sim-dedupe", "simulated provider: dedupe charges by idempotency key; false charges every call")
	fs.DurationVar(&f.WebhookDelay, "sim-webhook-delay", 0, "simulated provider: each event waits a random time up to this before its first delivery")
	fs.Float64Var(&f.WebhookDuplicate, "sim-webhook-duplicate", 0, "simulated provider: probability (0..1) each event delivery is sent twice at once")
	fs.Float64Var(&f.WebhookReorder, "sim-webhook-reorder", 0, "simulated provider: probability (0..1) an event is held back so later ones overtake it")
}

// registerKeyWindow registers --sim-key-window.
func registerKeyWindow(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "sim-key-window", payment.ProviderKeyWindow, "simulated provider: how long it remembers an idempotency key (Stripe: 24h); past it a charge under the key is a new charge. 0: for ever")
}

// dedupeFlag is --sim-dedupe, the inverse of Faults.NoDedupe.
type dedupeFlag struct{ f *sim.Faults }

func (d dedupeFlag) String() string {
	return strconv.FormatBool(d.f == nil || !d.f.NoDedupe) // flag may call it on a zero value
}

func (d dedupeFlag) Set(v string) error {
	dedupe, err := strconv.ParseBool(v)
	d.f.NoDedupe = !dedupe
	return err
}

func (d dedupeFlag) IsBoolFlag() bool { return true }
