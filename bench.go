package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oncepay/oncepay/loadtest"
)

// runBench drives a running server with load and checks the ledger after;
// with --compare it starts its own servers instead and prints the table of
// BENCHMARKS.md. An invariant violation is an error, so the exit status
// tells CI.
func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "fill" {
		return runBenchFill(ctx, args[1:], getenv, stdout, stderr)
	}
	var (
		cfg      loadtest.Config
		scenario string
		compare  bool
		// deliveries measures events delivered beside payments made.
		deliveries bool
		serveFlags string
	)
	fs := newFlagSet("bench", "bench [flags]", stderr)
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "base URL of the running oncepay to load")
	fs.StringVar(&cfg.APIKey, "api-key", "", "merchant API key (serve); empty for demo")
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "the server's admin token, to read the ledger (serve); empty for demo")
	fs.StringVar(&cfg.Scope, "scope", "demo", `the scope the payments land in, to find their charges in the ledger: the API key's id ("apikey list"), or "demo"`)
	fs.StringVar(&scenario, "scenario", "new", "new, replay, storm or mixed (70% new, 25% replay, 5% same-key retry)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long the measured load lasts")
	fs.IntVar(&cfg.Connections, "connections", 64, "keep-alive connections, one worker each")
	fs.IntVar(&cfg.StormSize, "storm-size", 1000, "storm: requests sent at once on one key")
	fs.IntVar(&cfg.ReplayKeys, "replay-keys", 1000, "replay: payments created first, then replayed")
	fs.BoolVar(&deliveries, "deliveries", false, "start this binary as serve on temporary files with one merchant and one endpoint at a fast receiver on loopback, run new payments for --duration, and print the events delivered per second beside the payments per second, and how long the backlog took to drain; --url, --api-key and --scope are not used")
	fs.StringVar(&serveFlags, "serve-flags", "", "with --deliveries: flags for the serve it starts, space-separated (a value runs to the next --); default serve's own")
	fs.BoolVar(&compare, "compare", false, "run every scenario against this binary started as a demo server on temporary files, with group commit and then with --max-batch 1, measure the SQL ceiling of each, and print the ratios; --url, --api-key and --scope are not used")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	cfg.Scenario = loadtest.Scenario(scenario)
	if compare {
		return benchCompare(ctx, cfg, stdout)
	}
	if deliveries {
		return benchDeliveries(ctx, cfg, splitFlags(serveFlags), stdout)
	}
	rep, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.Check(ctx); err != nil {
		return err
	}
	rep.Write(stdout)
	if n := rep.Violations(); n > 0 {
		return fmt.Errorf("%d invariant violations", n)
	}
	return nil
}

// benchFiles is this very binary, to run as the server, and a new
// temporary directory for its files ($TMPDIR: put it on the disk to
// measure), which the caller removes.
func benchFiles() (exe, dir string, err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", err
	}
	dir, err = os.MkdirTemp("", "oncepay-bench-")
	return exe, dir, err
}

// benchCompare runs loadtest.Compare with this very binary as the server,
// on files in a temporary directory ($TMPDIR: put it on the disk to measure).
func benchCompare(ctx context.Context, cfg loadtest.Config, stdout io.Writer) error {
	exe, dir, err := benchFiles()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := loadtest.Compare(ctx, loadtest.CompareConfig{Exe: exe, Dir: dir, Schema: schema, Load: cfg, Progress: stdout})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	c.Write(stdout)
	if n := c.Violations(); n > 0 {
		return fmt.Errorf("%d invariant violations", n)
	}
	return nil
}

// benchDeliveries runs loadtest.Deliveries with this very binary as the
// server, on files in a temporary directory.
func benchDeliveries(ctx context.Context, cfg loadtest.Config, serve []string, stdout io.Writer) error {
	exe, dir, err := benchFiles()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res, err := loadtest.Deliveries(ctx, loadtest.DeliveryConfig{Exe: exe, Dir: dir, Load: cfg, Serve: serve, Progress: stdout})
	if err != nil {
		return err
	}
	res.Write(stdout)
	if n := res.Violations(); n > 0 {
		return fmt.Errorf("%d invariant violations", n)
	}
	return nil
}

// splitFlags splits "--a x --b @every 1s" into its flags and their values:
// a value runs to the next word that begins with "--", spaces and all.
func splitFlags(s string) []string {
	var args []string
	valued := false // the last arg is a value, which the next word extends
	for _, w := range strings.Fields(s) {
		switch {
		case strings.HasPrefix(w, "--"):
			args, valued = append(args, w), false
		case valued:
			args[len(args)-1] += " " + w
		default:
			args, valued = append(args, w), true
		}
	}
	return args
}
