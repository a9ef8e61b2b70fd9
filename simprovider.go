package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/oncepay/oncepay/provider/sim"
)

// runSimProvider runs the simulated provider as its own HTTP server, so the
// faults it injects cross a real socket.
func runSimProvider(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var (
		addr, db string
		faults   sim.Faults
	)
	fs := newFlagSet("sim-provider", "sim-provider [flags]", stderr)
	fs.StringVar(&addr, "addr", "127.0.0.1:8090", "address to listen on")
	fs.StringVar(&db, "db", "oncepay-sim.db", "the simulated provider's ledger file")
	registerFaults(fs, &faults)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	s, err := openSim(db, faults)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("simulated provider listening", "url", "http://"+ln.Addr().String(), "ledger", db)
	return serveHTTP(ctx, ln, s.Handler(), 5*time.Second, log)
}

// registerFaults registers the --sim-* fault flags.
func registerFaults(fs *flag.FlagSet, f *sim.Faults) {
	fs.DurationVar(&f.Latency, "sim-latency", 0, "simulated provider: delay before every call")
	fs.Float64Var(&f.FailBeforeCharge, "sim-fail-before-charge", 0, "simulated provider: probability (0..1) a charge fails before charging")
	fs.Float64Var(&f.FailAfterCharge, "sim-fail-after-charge", 0, "simulated provider: probability (0..1) a charge's response is lost after charging")
	fs.Var(dedupeFlag{f}, "sim-dedupe", "simulated provider: dedupe charges by idempotency key; false charges every call")
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
