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
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/remote"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
)

// serveConfig is what serve and demo are configured with.
type serveConfig struct {
	addr            string
	db              string
	provider        string
	simDB           string
	simFaults       sim.Faults
	providerTimeout time.Duration
	lease           time.Duration
	maxBatch        int
	batchWait       time.Duration
	logLevel        slog.Level
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (loopback unless you say otherwise)")
	fs.StringVar(&c.db, "db", "oncepay.db", "SQLite database file")
	fs.StringVar(&c.provider, "provider", "sim", `payment provider: "sim" (simulated, in process) or the URL of a running "oncepay sim-provider"`)
	fs.StringVar(&c.simDB, "sim-db", "", `ledger file of the in-process simulated provider (default: the --db name with "-sim" added)`)
	registerFaults(fs, &c.simFaults)
	fs.DurationVar(&c.providerTimeout, "provider-timeout", 10*time.Second, "longest wait for one provider call; past it the outcome is unknown (503)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long a request owns its claim before a retry may take it over; must exceed --provider-timeout")
	fs.IntVar(&c.maxBatch, "max-batch", 256, "most writes committed together in one transaction (group commit); 1 commits each alone")
	fs.DurationVar(&c.batchWait, "batch-wait", 0, "how long the writer waits for more writes to join a batch (0: only those already waiting)")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: DEBUG, INFO, WARN or ERROR")
}

func (c *serveConfig) validate() error {
	if c.lease <= c.providerTimeout {
		return fmt.Errorf("--lease (%s) must exceed --provider-timeout (%s): a retry must not take over a call still running", c.lease, c.providerTimeout)
	}
	if c.simDB == "" {
		c.simDB = strings.TrimSuffix(c.db, ".db") + "-sim.db"
	}
	return nil
}

// runServe runs serve (merchant API keys required) or, with demo, the
// zero-config workshop mode.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, demo bool) error {
	name := "serve"
	if demo {
		name = "demo"
	}
	var cfg serveConfig
	fs := newFlagSet(name, name+" [flags]", stderr)
	cfg.register(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	var handler slog.Handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel})
	if demo {
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel})
	}
	log := slog.New(handler)

	db, err := sqlitestore.Open(ctx, cfg.db, schema, sqlitestore.Options{MaxBatch: cfg.maxBatch, MaxWait: cfg.batchWait})
	if err != nil {
		return err
	}
	defer db.Close()

	srvCfg := server.Config{Log: log}
	var provider payment.Provider
	if cfg.provider == "sim" {
		s, err := openSim(cfg.simDB, cfg.simFaults)
		if err != nil {
			return err
		}
		defer s.Close()
		provider, srvCfg.Sim = s, s.Handler()
		if !demo {
			log.Warn("SIMULATED PROVIDER: no real money moves. Set --provider for a real one.", "ledger", cfg.simDB)
		}
	} else {
		if !strings.HasPrefix(cfg.provider, "http://") && !strings.HasPrefix(cfg.provider, "https://") {
			return fmt.Errorf(`--provider %q: want "sim" or the http(s) URL of a running sim-provider`, cfg.provider)
		}
		provider = remote.New(cfg.provider, cfg.providerTimeout)
	}
	srvCfg.Payments = &payment.Service{
		Store: db, Provider: provider, Log: log, Now: time.Now,
		ProviderTimeout: cfg.providerTimeout, Lease: cfg.lease,
	}
	if !demo {
		srvCfg.Keys = db
	}

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	if demo {
		fmt.Fprintf(stdout, "oncepay demo: %s (simulated provider, no API key needed)\n", url)
	}
	log.Info("listening", "url", url, "mode", name, "db", cfg.db)
	return serveHTTP(ctx, ln, server.New(srvCfg), cfg.providerTimeout, log)
}

func openSim(path string, faults sim.Faults) (*sim.Sim, error) {
	s, err := sim.Open(path)
	if err != nil {
		return nil, err
	}
	if err := s.SetFaults(faults); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// serveHTTP serves h on ln until ctx ends, then shuts down gracefully:
// requests in flight (a provider call among them) get to finish.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, providerTimeout time.Duration, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      providerTimeout + 15*time.Second, // a write follows the provider call
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
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
