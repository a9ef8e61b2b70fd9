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
	Reports map[Scenario]*Report
	PeakRSS map[Scenario]int64 // bytes: the server's peak RSS during each scenario's load, 0 if unknown
	Ceiling Ceiling
}

// Comparison is a comparison's results, in WritePaths order.
type Comparison struct {
	Paths []*PathResult
}

// Compare starts the server once per write path on fresh files, runs every
// scenario against it and checks each, then measures the SQL ceiling of
// each write path. Invariant violations are in the reports, not the error.
func Compare(ctx context.Context, cfg CompareConfig) (*Comparison, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
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
	res := &PathResult{WritePath: wp, Reports: map[Scenario]*Report{}, PeakRSS: map[Scenario]int64{}}
	name := strings.ReplaceAll(wp.Name, " ", "-")
	args := []string{"demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(cfg.Dir, name+".db")}
	if wp.MaxBatch > 0 {
		args = append(args, "--max-batch", strconv.Itoa(wp.MaxBatch))
	}
	srv, err := StartServer(ctx, cfg.Exe, filepath.Join(cfg.Dir, name+".log"), args...)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fmt.Fprintf(cfg.Progress, "== %s: %s %s\n", wp.Name, cfg.Exe, strings.Join(args, " "))
	for _, sc := range Scenarios {
		load := cfg.Load
		load.URL, load.Scenario = srv.URL, sc
		// The peak is reset before the load and read before the check, whose
		// ledger dump is not part of serving payments.
		rssErr := srv.ResetPeakRSS()
		rep, err := Run(ctx, load)
		if err != nil {
			return nil, err
		}
		if rssErr == nil {
			res.PeakRSS[sc], _ = srv.PeakRSS()
		}
		if err := rep.Check(ctx); err != nil {
			return nil, err
		}
		rep.Write(cfg.Progress)
		res.Reports[sc] = rep
	}
	if err := srv.Stop(); err != nil {
		return nil, err
	}
	db, err := sqlitestore.Open(ctx, filepath.Join(cfg.Dir, name+"-ceiling.db"), cfg.Schema, sqlitestore.Options{MaxBatch: wp.MaxBatch})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	load := cfg.Load
	if err := load.setDefaults(); err != nil {
		return nil, err
	}
	if res.Ceiling, err = StoreCeiling(ctx, db, load.Connections, load.Duration); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "SQL ceiling: %s payments/s (claim and record, no HTTP), %.1f writes per commit\n",
		thousands(res.Ceiling.Throughput()), res.Ceiling.WritesPerCommit())
	return res, nil
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
	canonical, hash := req.Canonical(), req.Fingerprint()
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
				a := payment.Attempt{
					Scope: "ceiling", Key: fmt.Sprintf("%d-%d", w, n), ID: payment.NewPaymentID(),
					Request: canonical, RequestHash: hash, Amount: req.Amount, Currency: req.Currency,
					Status: payment.InProgress, Fence: 1, LeaseExpiresAt: now.Add(time.Minute),
					CreatedAt: now, UpdatedAt: now,
				}
				err := claimAndRecord(ctx, db, a)
				if err != nil {
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
	if err != nil || !claimed {
		return errors.Join(err, fmt.Errorf("claim %s: not claimed", a.Key))
	}
	o := payment.SucceededOutcome(a, payment.Charge{ID: "ch_" + a.Key})
	ok, err := db.Record(ctx, a.Scope, a.Key, a.Fence, o, time.Now())
	if err != nil || !ok {
		return errors.Join(err, fmt.Errorf("record %s: not recorded", a.Key))
	}
	return nil
}

// Server is an oncepay server process this package started.
type Server struct {
	URL  string
	cmd  *exec.Cmd
	done chan error
	once sync.Once
	err  error
}

// StartServer runs exe with args, its stderr to logPath, and waits for the
// URL it prints on stdout once it listens.
func StartServer(ctx context.Context, exe, logPath string, args ...string) (*Server, error) {
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
	s := &Server{cmd: cmd, done: make(chan error, 1)}
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
func (s *Server) Stop() error {
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

// ResetPeakRSS starts a new peak for PeakRSS (Linux: /proc/PID/clear_refs).
func (s *Server) ResetPeakRSS() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.cmd.Process.Pid), []byte("5"), 0)
}

// PeakRSS is the server's peak resident memory in bytes since it started or
// since ResetPeakRSS (Linux: VmHWM in /proc/PID/status).
func (s *Server) PeakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// Write prints the comparison as a table: each write path's figures, and
// their ratio.
func (c *Comparison) Write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, p := range c.Paths {
		fmt.Fprintf(tw, "%s\t", p.Name)
	}
	fmt.Fprint(tw, "ratio\t\n")
	row := func(label string, v func(p *PathResult) float64, format func(float64) string, ratio bool) {
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
	perSec := func(f float64) string { return thousands(f) + "/s" }
	millis := func(f float64) string { return ms(time.Duration(f)) }
	for _, sc := range Scenarios {
		rep := func(p *PathResult) *Report { return p.Reports[sc] }
		row(string(sc)+" throughput", func(p *PathResult) float64 { return rep(p).Throughput() }, perSec, true)
		if sc == Storm {
			row("storm slowest round", func(p *PathResult) float64 { return float64(rep(p).Storm.Max) }, millis, false)
			continue
		}
		row(string(sc)+" p50", func(p *PathResult) float64 { return float64(rep(p).Latency.P50) }, millis, false)
		row(string(sc)+" p99", func(p *PathResult) float64 { return float64(rep(p).Latency.P99) }, millis, false)
	}
	mb := func(f float64) string { return fmt.Sprintf("%.0f MB", f/(1<<20)) }
	row("server peak RSS (max over scenarios)", func(p *PathResult) float64 {
		var m int64
		for _, v := range p.PeakRSS {
			m = max(m, v)
		}
		return float64(m)
	}, mb, false)
	row("SQL ceiling, no HTTP", func(p *PathResult) float64 { return p.Ceiling.Throughput() }, perSec, true)
	row("writes per commit at the ceiling", func(p *PathResult) float64 { return p.Ceiling.WritesPerCommit() }, func(f float64) string { return fmt.Sprintf("%.1f", f) }, false)
	row("new over HTTP / SQL ceiling", func(p *PathResult) float64 {
		return 100 * p.Reports[New].Throughput() / p.Ceiling.Throughput()
	}, func(f float64) string { return fmt.Sprintf("%.0f%%", f) }, false)
	count := func(f float64) string { return thousands(f) }
	row("5xx answers", func(p *PathResult) float64 { return float64(p.sum((*Report).ServerErrors)) }, count, false)
	row("requests without an answer", func(p *PathResult) float64 {
		return float64(p.sum(func(r *Report) int { return r.Errors }))
	}, count, false)
	row("invariant violations", func(p *PathResult) float64 { return float64(p.Violations()) }, count, false)
	tw.Flush()
}

// Violations counts broken invariants over every scenario.
func (p *PathResult) Violations() int { return p.sum((*Report).Violations) }

func (p *PathResult) sum(f func(*Report) int) int {
	var n int
	for _, r := range p.Reports {
		n += f(r)
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
