package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/sqlitestore"
)

// CompareConfig is a comparison: the same load against group commit and
// against per-request commits, in one run on one machine.
type CompareConfig struct {
	Exe      string    // the oncepay binary, started as "demo" for each write path
	Dir      string    // where the database files go: on the disk being measured
	Schema   string    // oncepay's schema, for the SQL ceiling
	Load     Config    // every scenario's load; URL and Scenario are set per run
	Progress io.Writer // each report as it completes
}

// WritePath is one way of committing writes.
type WritePath struct {
	Name     string
	MaxBatch int // sqlitestore.Options.MaxBatch; 0 is the default
}

// WritePaths are what a comparison compares: the default, then one commit
// (one fsync) per write.
var WritePaths = []WritePath{{"group commit", 0}, {"per-request commit", 1}}

// PathResult is what one write path did.
type PathResult struct {
	WritePath
	Runs    map[Scenario]*Measured
	Ceiling Ceiling
}

// Measured is one scenario run against one server, with what only the
// process that started the server can read of it.
type Measured struct {
	*Report
	PeakRSS   int64         // bytes: the server's peak RSS during the measured load; 0 if unknown
	ServerCPU time.Duration // the server's CPU time during the measured load; 0 if unknown
}

// Comparison is a comparison's results, in WritePaths order.
type Comparison struct {
	Paths []*PathResult
}

// Compare runs every scenario against each write path, each on a server of
// its own, and checks each; then it measures the SQL ceiling of each write
// path. Invariant violations are in the reports, not the error.
func Compare(ctx context.Context, cfg CompareConfig) (*Comparison, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	cfg.Load.setDefaults()
	c := &Comparison{}
	for _, wp := range WritePaths {
		res, err := comparePath(ctx, cfg, wp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", wp.Name, err)
		}
		c.Paths = append(c.Paths, res)
	}
	return c, nil
}

func comparePath(ctx context.Context, cfg CompareConfig, wp WritePath) (*PathResult, error) {
	res := &PathResult{WritePath: wp, Runs: map[Scenario]*Measured{}}
	name := strings.ReplaceAll(wp.Name, " ", "-")
	fmt.Fprintf(cfg.Progress, "== %s\n", wp.Name)
	for _, sc := range Scenarios {
		m, err := measureScenario(ctx, cfg, wp, filepath.Join(cfg.Dir, name+"-"+string(sc)), sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc, err)
		}
		res.Runs[sc] = m
	}
	db, err := sqlitestore.Open(ctx, filepath.Join(cfg.Dir, name+"-ceiling.db"), cfg.Schema, sqlitestore.Options{MaxBatch: wp.MaxBatch})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if res.Ceiling, err = StoreCeiling(ctx, db, cfg.Load.Connections, cfg.Load.Duration); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "SQL ceiling: %s payments/s (claim and record, no HTTP), %.1f writes per commit\n",
		thousands(res.Ceiling.Throughput()), res.Ceiling.WritesPerCommit())
	return res, nil
}

// measureScenario runs one scenario against a server of its own, started
// on fresh files named from base: no scenario inherits another's database
// or memory (the ledger read by a check, say).
func measureScenario(ctx context.Context, cfg CompareConfig, wp WritePath, base string, sc Scenario) (*Measured, error) {
	args := []string{"demo", "--addr", "127.0.0.1:0", "--db", base + ".db"}
	if wp.MaxBatch > 0 {
		args = append(args, "--max-batch", strconv.Itoa(wp.MaxBatch))
	}
	srv, err := startServer(ctx, cfg.Exe, base+".log", args...)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fmt.Fprintf(cfg.Progress, "$ %s %s\n", cfg.Exe, strings.Join(args, " "))
	m := &Measured{}
	load := cfg.Load
	load.URL, load.Scenario = srv.URL, sc
	var cpu0 time.Duration
	var rssErr, cpuErr error
	load.Started = func() {
		rssErr = resetPeakRSS(srv.Pid())
		cpu0, cpuErr = processCPU(srv.Pid())
	}
	load.Stopped = func() {
		if cpu1, err := processCPU(srv.Pid()); err == nil && cpuErr == nil {
			m.ServerCPU = cpu1 - cpu0
		}
		if rssErr == nil {
			m.PeakRSS, _ = peakRSS(srv.Pid())
		}
	}
	if m.Report, err = Run(ctx, load); err != nil {
		return nil, err
	}
	if err := m.Check(ctx); err != nil {
		return nil, err
	}
	m.Write(cfg.Progress)
	fmt.Fprintf(cfg.Progress, "  server    peak RSS %s, CPU %s, %s per request\n",
		megabytes(m.PeakRSS), m.ServerCPU.Round(time.Millisecond), micros(m.perRequest(m.ServerCPU)))
	return m, srv.Stop()
}

// Ceiling is the store alone: what the claim and record statements reach
// on this disk with this write path, without HTTP, JSON or a provider.
type Ceiling struct {
	Payments        int
	Elapsed         time.Duration
	Commits, Writes int64
}

// Throughput is payments (a claim and a record each) per second.
func (c Ceiling) Throughput() float64 { return float64(c.Payments) / c.Elapsed.Seconds() }

// WritesPerCommit is the mean group-commit batch.
func (c Ceiling) WritesPerCommit() float64 { return float64(c.Writes) / float64(max(c.Commits, 1)) }

// StoreCeiling claims and records fresh payments on db from workers
// goroutines for d: the statements of a payment on the same file, pragmas
// and write path as the server, with nothing else in the way.
func StoreCeiling(ctx context.Context, db *sqlitestore.DB, workers int, d time.Duration) (Ceiling, error) {
	req := payment.Request{Amount: 1999, Currency: "EUR", Source: "tok_visa", Description: "oncepay bench"}
	commits0, writes0 := db.WriteStats()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		payments int
		errs     []error
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			var n int
			for ; time.Now().Before(deadline); n++ {
				now := time.Now()
				a := payment.NewAttempt("ceiling", fmt.Sprintf("%d-%d", w, n), req, now, time.Minute)
				if err := claimAndRecord(ctx, db, a); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			payments += n
			mu.Unlock()
		})
	}
	wg.Wait()
	c := Ceiling{Payments: payments, Elapsed: time.Since(start)}
	commits, writes := db.WriteStats()
	c.Commits, c.Writes = commits-commits0, writes-writes0
	return c, errors.Join(errs...)
}

func claimAndRecord(ctx context.Context, db *sqlitestore.DB, a payment.Attempt) error {
	claimed, err := db.Claim(ctx, &a)
	if err != nil {
		return fmt.Errorf("claim %s: %w", a.Key, err)
	}
	if !claimed {
		return fmt.Errorf("claim %s: a fresh key was not claimed", a.Key)
	}
	o := payment.SucceededOutcome(a, payment.Charge{ID: "ch_" + a.Key})
	o.Event = payment.ChangeEvent(a, o, time.Now())
	recorded, err := db.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence, o, time.Now())
	if err != nil {
		return fmt.Errorf("record %s: %w", a.Key, err)
	}
	if !recorded {
		return fmt.Errorf("record %s: the owner's record was fenced out", a.Key)
	}
	return nil
}

// server is an oncepay server process this package started.
type server struct {
	URL  string
	cmd  *exec.Cmd
	done chan error
	once sync.Once
	err  error
}

// startServer runs exe with args, its stderr to logPath, and waits for the
// URL it prints on stdout once it listens.
func startServer(ctx context.Context, exe, logPath string, args ...string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(exe, args...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1)}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			for _, f := range strings.Fields(sc.Text()) {
				if strings.HasPrefix(f, "http://") && len(urls) == 0 {
					urls <- f
				}
			}
		}
		s.done <- cmd.Wait() // after stdout is drained, as Wait requires
	}()
	select {
	case s.URL = <-urls:
		return s, nil
	case err := <-s.done:
		return nil, fmt.Errorf("server exited before listening (%v); see %s", err, logPath)
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	s.Stop()
	return nil, fmt.Errorf("server printed no URL; see %s", logPath)
}

// Stop asks the server to shut down (SIGTERM) and waits for it, killing it
// if it takes more than 30 seconds. It is safe to call twice.
func (s *server) Stop() error {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case s.err = <-s.done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			s.err = errors.Join(errors.New("server did not stop in 30s; killed"), <-s.done)
		}
	})
	return s.err
}

// Pid is the server's process id.
func (s *server) Pid() int { return s.cmd.Process.Pid }

// perRequest is d shared among the measured requests.
func (m *Measured) perRequest(d time.Duration) time.Duration {
	return d / time.Duration(max(m.Requests, 1))
}

// Write prints the comparison: a table of each write path's figures and
// their ratio, then the group-commit path against the targets of issue 6.
func (c *Comparison) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, p := range c.Paths {
		fmt.Fprintf(tw, "%s\t", p.Name)
	}
	fmt.Fprint(tw, "ratio\t\n")
	// row prints a figure for each path; with ratio, the first path's over
	// the second's.
	row := func(label string, ratio bool, v func(p *PathResult) float64, format func(float64) string) {
		fmt.Fprintf(tw, "%s\t", label)
		var vals []float64
		for _, p := range c.Paths {
			vals = append(vals, v(p))
			fmt.Fprintf(tw, "%s\t", format(v(p)))
		}
		if ratio && len(vals) == 2 && vals[1] > 0 {
			fmt.Fprintf(tw, "%.1fx", vals[0]/vals[1])
		}
		fmt.Fprint(tw, "\t\n")
	}
	perSec := perSecond
	millis := func(f float64) string { return ms(time.Duration(f)) }
	micro := func(f float64) string { return micros(time.Duration(f)) }
	for _, sc := range Scenarios {
		run := func(p *PathResult) *Measured { return p.Runs[sc] }
		row(string(sc)+" throughput", true, func(p *PathResult) float64 { return run(p).Throughput() }, perSec)
		if sc == Storm {
			row("storm: slowest round answered in", false, func(p *PathResult) float64 { return float64(run(p).Storm.Max) }, millis)
		} else {
			row(string(sc)+" p50", false, func(p *PathResult) float64 { return float64(run(p).Latency.P50) }, millis)
			row(string(sc)+" p99", false, func(p *PathResult) float64 { return float64(run(p).Latency.P99) }, millis)
		}
		row(string(sc)+": server CPU per request", false, func(p *PathResult) float64 {
			return float64(run(p).perRequest(run(p).ServerCPU))
		}, micro)
		row(string(sc)+": load tool CPU per request", false, func(p *PathResult) float64 {
			return float64(run(p).perRequest(run(p).ClientCPU))
		}, micro)
		row(string(sc)+": server peak RSS", false, func(p *PathResult) float64 { return float64(run(p).PeakRSS) },
			func(f float64) string { return megabytes(int64(f)) })
	}
	row("SQL ceiling (store, no HTTP)", true, func(p *PathResult) float64 { return p.Ceiling.Throughput() }, perSec)
	row("writes per commit at the ceiling", false, func(p *PathResult) float64 { return p.Ceiling.WritesPerCommit() },
		func(f float64) string { return fmt.Sprintf("%.1f", f) })
	row("new over HTTP / SQL ceiling", false, func(p *PathResult) float64 {
		return 100 * p.Runs[New].Throughput() / p.Ceiling.Throughput()
	}, func(f float64) string { return fmt.Sprintf("%.0f%%", f) })
	count := func(f float64) string { return thousands(f) }
	row("5xx answers", false, func(p *PathResult) float64 { return float64(p.sum((*Measured).ServerErrors)) }, count)
	row("requests without an answer", false, func(p *PathResult) float64 {
		return float64(p.sum(func(m *Measured) int { return m.Errors }))
	}, count)
	row("invariant violations", false, func(p *PathResult) float64 { return float64(p.Violations()) }, count)
	tw.Flush()
	if len(c.Paths) == 2 {
		c.writeTargets(w)
	}
}

// writeTargets checks the group-commit path against the targets of issue 6
// (set for 64 connections and storms of 1,000).
func (c *Comparison) writeTargets(w io.Writer) {
	group, perRequest := c.Paths[0], c.Paths[1]
	newRun, storm := group.Runs[New], group.Runs[Storm]
	ratio := newRun.Throughput() / perRequest.Runs[New].Throughput()
	targets := []struct {
		name, got string
		met       bool
	}{
		{"new payments >= 15,000/s", perSecond(newRun.Throughput()), newRun.Throughput() >= 15000},
		{"new payments >= 6x per-request commit", fmt.Sprintf("%.1fx", ratio), ratio >= 6},
		{"new payments p99 <= 10ms", ms(newRun.Latency.P99), newRun.Latency.P99 <= 10*time.Millisecond},
		{"replays >= 40,000/s", perSecond(group.Runs[Replay].Throughput()), group.Runs[Replay].Throughput() >= 40000},
		{"server RSS <= 100 MB, every scenario", megabytes(group.peakRSS()), group.peakRSS() > 0 && group.peakRSS() <= 100<<20},
		{fmt.Sprintf("storm of %d answered within 1s", storm.Storm.Size), ms(storm.Storm.Max), storm.Storm.Max <= time.Second},
		{"storm: exactly one charge per key", fmt.Sprintf("%d charged of %d keys, %d violations", storm.Charged, storm.Keys, storm.Violations()),
			storm.Charged == storm.Keys && storm.Violations() == 0},
	}
	fmt.Fprintln(w, "\ntargets (group commit):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range targets {
		verdict := "MISSED"
		if t.met {
			verdict = "met"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", t.name, t.got, verdict)
	}
	tw.Flush()
}

func (p *PathResult) peakRSS() int64 {
	var m int64
	for _, r := range p.Runs {
		m = max(m, r.PeakRSS)
	}
	return m
}

func perSecond(f float64) string { return thousands(f) + "/s" }

func megabytes(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }

// Violations counts broken invariants over every scenario.
func (p *PathResult) Violations() int { return p.sum((*Measured).Violations) }

func (p *PathResult) sum(f func(*Measured) int) int {
	var n int
	for _, m := range p.Runs {
		n += f(m)
	}
	return n
}

// Violations counts broken invariants over every write path.
func (c *Comparison) Violations() int {
	var n int
	for _, p := range c.Paths {
		n += p.Violations()
	}
	return n
}
