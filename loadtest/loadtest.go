// Package loadtest drives a running oncepay over real HTTP and checks, after
// the load, that no payment was charged twice: it is what "oncepay bench"
// runs and what BENCHMARKS.md reports.
//
// Every scenario uses keep-alive connections and a fixed pool of workers.
// After the load, Check reads the simulated provider's ledger
// (GET /sim/charges) and verifies the invariants of DESIGN.md from the
// client's side: at most one charge per downstream key, every 201 names the
// ledger's charge for its key, and every 201 for a key is the same bytes.
package loadtest

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario names a workload.
type Scenario string

// The scenarios.
const (
	// New sends a fresh key with every request: each one is a new payment.
	New Scenario = "new"
	// Replay creates ReplayKeys payments, then retries them at random: each
	// request is answered from the stored response.
	Replay Scenario = "replay"
	// Storm sends StormSize requests on one key at the same instant, round
	// after round with a new key, and times how long each round takes to be
	// answered in full.
	Storm Scenario = "storm"
	// Mixed is 70% new payments, 25% replays of payments made earlier in the
	// run and 5% retries of the key sent last, which may still be in flight.
	Mixed Scenario = "mixed"
)

// Scenarios lists every scenario, in the order a comparison runs them.
var Scenarios = []Scenario{New, Replay, Storm, Mixed}

// Config is one load run.
type Config struct {
	URL         string // base URL of a running oncepay, e.g. http://127.0.0.1:8080
	APIKey      string // merchant API key; empty in demo mode
	AdminToken  string // reads the ledger (/sim/charges) in serve mode; empty in demo mode
	Scope       string // the scope payments land in (the API key's id; "demo" in demo mode); default "demo"
	Scenario    Scenario
	Duration    time.Duration // how long the measured load lasts; default 10s
	Connections int           // concurrent keep-alive connections and workers; default 64
	StormSize   int           // concurrent requests on one key in a storm round; default 1000
	ReplayKeys  int           // payments created before a replay run; default 1000

	// Started and Stopped, if set, are called as the measured phase begins
	// and ends, for readings of the server only the caller can take (its CPU
	// time, its peak memory): set-up requests are left out of them.
	Started, Stopped func()
}

// setDefaults fills in what c leaves zero.
func (c *Config) setDefaults() {
	c.URL = strings.TrimSuffix(c.URL, "/")
	if c.Scope == "" {
		c.Scope = "demo"
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Connections <= 0 {
		c.Connections = 64
	}
	if c.StormSize <= 0 {
		c.StormSize = 1000
	}
	if c.ReplayKeys <= 0 {
		c.ReplayKeys = 1000
	}
}

func (c *Config) validate() error {
	if c.URL == "" {
		return errors.New("loadtest: no URL")
	}
	switch c.Scenario {
	case New, Replay, Storm, Mixed:
		return nil
	}
	return fmt.Errorf("loadtest: unknown scenario %q (want new, replay, storm or mixed)", c.Scenario)
}

// payBody is every request's body: the same body under one key is a retry,
// never a reused key.
var payBody = []byte(`{"amount":1999,"currency":"EUR","source":"tok_visa","description":"oncepay bench"}`)

// Run drives the scenario against cfg.URL and reports what it saw. Call
// Check on the report to verify the invariants against the ledger.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	conns := cfg.Connections
	if cfg.Scenario == Storm {
		conns = cfg.StormSize // a storm is that many requests at once
	}
	r := &runner{
		cfg: cfg,
		// One transport, sized so that every worker keeps its connection.
		client: &http.Client{
			Transport: &http.Transport{
				MaxIdleConns:        conns,
				MaxIdleConnsPerHost: conns,
				IdleConnTimeout:     time.Minute,
				DisableCompression:  true,
			},
			Timeout: 30 * time.Second,
		},
		url: cfg.URL + "/v1/payments",
		// Unique per run: a server used before holds older runs' keys.
		prefix: "bench-" + crand.Text()[:10] + "-",
	}
	defer r.client.CloseIdleConnections()

	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Scenario: cfg.Scenario, Connections: conns, cfg: cfg}
	var recs []*recorder
	rep.Elapsed, rep.ClientCPU = r.measure(func() {
		switch cfg.Scenario {
		case New:
			recs = r.pool(ctx, cfg.Duration, func(w, seq int) (string, bool, bool) {
				return r.freshKey(w, seq), true, true
			})
		case Replay:
			recs = r.pool(ctx, cfg.Duration, func(int, int) (string, bool, bool) {
				return r.created[rand.IntN(len(r.created))], false, true // read-only now: no lock
			})
		case Storm:
			recs, rep.Storm = r.storm(ctx)
		case Mixed:
			recs = r.pool(ctx, cfg.Duration, r.mixedKey)
		}
	})
	rep.merge(recs, r.warmup)
	if rep.Requests == 0 && rep.Errors > 0 {
		return nil, fmt.Errorf("loadtest: no request was answered; the first error: %w", rep.FirstError)
	}
	return rep, nil
}

// runner holds what a run's workers share.
type runner struct {
	cfg    Config
	client *http.Client
	url    string
	prefix string

	mu      sync.Mutex
	created []string // keys answered 201, for replays to pick from

	last atomic.Pointer[string] // the key sent most recently, for same-key retries

	warmup []*recorder // requests that prepared the run: checked, not timed
}

// picker returns the key of a worker's next request; fresh reports a key
// never sent before, and ok false stops the worker.
type picker func(w, seq int) (key string, fresh, ok bool)

func (r *runner) freshKey(w, seq int) string {
	return r.prefix + strconv.Itoa(w) + "-" + strconv.Itoa(seq)
}

// pool runs cfg.Connections workers until d has passed (d 0: until pick
// stops them) and returns their records. A fresh key answered 201 joins the
// replay pool. A worker finishes the request it has started, so a run lasts
// d plus at most one request.
func (r *runner) pool(ctx context.Context, d time.Duration, pick picker) []*recorder {
	recs := make([]*recorder, r.cfg.Connections)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range recs {
		rec := newRecorder()
		recs[w] = rec
		wg.Go(func() {
			for seq := 0; ctx.Err() == nil && (d == 0 || time.Now().Before(deadline)); seq++ {
				key, fresh, ok := pick(w, seq)
				if !ok {
					return
				}
				if r.do(ctx, rec, key) == http.StatusCreated && fresh {
					r.mu.Lock()
					r.created = append(r.created, key)
					r.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return recs
}

// do sends one payment request under key, records its answer in rec and
// returns its status (0 if none came).
func (r *runner) do(ctx context.Context, rec *recorder, key string) int {
	r.last.Store(&key)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(payBody))
	if err != nil {
		rec.fail(key, err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		rec.fail(key, err)
		return 0
	}
	rec.buf.Reset()
	_, err = rec.buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		rec.fail(key, err)
		return 0
	}
	rec.observe(key, time.Since(start), resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", rec.buf.Bytes())
	return resp.StatusCode
}

// prepare does what a scenario needs before it is measured: a replay run
// creates the payments it replays; a storm opens its connections, so that a
// round times the server and not a thousand TCP handshakes.
func (r *runner) prepare(ctx context.Context) error {
	switch r.cfg.Scenario {
	case Replay:
		var handed atomic.Int64
		r.warmup = r.pool(ctx, 0, func(w, seq int) (string, bool, bool) {
			ok := handed.Add(1) <= int64(r.cfg.ReplayKeys)
			return r.freshKey(w, seq), true, ok
		})
		if len(r.created) == 0 {
			return errors.New("loadtest: no payment was created to replay; see the status counts of a new run")
		}
	case Storm:
		return r.connect(ctx, r.cfg.StormSize)
	}
	return nil
}

// measure runs the measured phase between cfg.Started and cfg.Stopped, and
// returns its wall time and this process's CPU time over it (0 if unknown).
func (r *runner) measure(phase func()) (elapsed, cpu time.Duration) {
	if r.cfg.Started != nil {
		r.cfg.Started()
	}
	cpu0, err0 := processCPU(os.Getpid())
	start := time.Now()
	phase()
	elapsed = time.Since(start)
	cpu1, err1 := processCPU(os.Getpid())
	if r.cfg.Stopped != nil {
		r.cfg.Stopped()
	}
	if err0 != nil || err1 != nil {
		return elapsed, 0
	}
	return elapsed, cpu1 - cpu0
}

// mixedKey picks the key of the next request of the mixed scenario.
func (r *runner) mixedKey(w, seq int) (string, bool, bool) {
	switch p := rand.Float64(); {
	case p < 0.25:
		r.mu.Lock()
		var key string
		if n := len(r.created); n > 0 {
			key = r.created[rand.IntN(n)]
		}
		r.mu.Unlock()
		if key != "" {
			return key, false, true
		}
	case p < 0.30:
		if last := r.last.Load(); last != nil {
			return *last, false, true
		}
	}
	return r.freshKey(w, seq), true, true
}

// storm sends cfg.StormSize requests on one key at the same instant, round
// after round with a new key, until cfg.Duration has passed (at least one
// round), and times each round until its last answer.
func (r *runner) storm(ctx context.Context) ([]*recorder, *StormStats) {
	recs := make([]*recorder, r.cfg.StormSize)
	for i := range recs {
		recs[i] = newRecorder()
	}
	st := &StormStats{Size: len(recs)}
	start := time.Now()
	for round := 0; round == 0 || (time.Since(start) < r.cfg.Duration && ctx.Err() == nil); round++ {
		key := r.prefix + "storm-" + strconv.Itoa(round)
		release := make(chan struct{})
		var ready, done sync.WaitGroup
		for _, rec := range recs {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-release
				r.do(ctx, rec, key)
			})
		}
		ready.Wait()
		begun := time.Now()
		close(release)
		done.Wait()
		st.rounds = append(st.rounds, time.Since(begun))
	}
	st.summarize()
	return recs, st
}

// connect opens n keep-alive connections to the server at once, by sending
// n health checks together.
func (r *runner) connect(ctx context.Context, n int) error {
	release := make(chan struct{})
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		first  atomic.Pointer[error]
	)
	for range n {
		wg.Go(func() {
			<-release
			if err := r.healthz(ctx); err != nil {
				failed.Add(1)
				first.CompareAndSwap(nil, &err)
			}
		})
	}
	close(release)
	wg.Wait()
	if err := first.Load(); err != nil {
		return fmt.Errorf("loadtest: open %d connections: %d failed, the first: %w", n, failed.Load(), *err)
	}
	return nil
}

func (r *runner) healthz(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	return err
}
