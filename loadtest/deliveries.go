package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DeliveryConfig is a delivery benchmark: new payments against a server of
// its own with one endpoint, a fast receiver on loopback, and how fast the
// payments' events reach it, in the same run.
type DeliveryConfig struct {
	Exe      string   // the oncepay binary, started as "serve"
	Dir      string   // where the database files go
	Load     Config   // the new-payments load; URL, APIKey, AdminToken and Scope are set here
	Serve    []string // extra flags for serve (--deliver-schedule, --max-batch, ...)
	Progress io.Writer
}

// DeliveryResult is what a delivery benchmark saw.
type DeliveryResult struct {
	*Report              // the payments
	Serve       []string // serve's command line
	Events      int      // events made (a payment's 201 is one)
	InWindow    int      // distinct events received while the payments ran
	Backlog     float64  // deliveries pending when the payments stopped
	Drain       time.Duration
	Received    int // distinct events received in all
	Duplicates  int // copies of an event received before
	First, Last time.Time
	windowStart time.Time
}

// DeliveryRate is distinct events received per second while the payments
// ran.
func (d *DeliveryResult) DeliveryRate() float64 { return float64(d.InWindow) / d.Elapsed.Seconds() }

// OverallRate is distinct events received per second from the first
// payment of the measured phase to the last event received.
func (d *DeliveryResult) OverallRate() float64 {
	return float64(d.Received) / d.Last.Sub(d.windowStart).Seconds()
}

// receiver is a merchant's endpoint that answers 204 at once and counts
// each event once by webhook-id.
type receiver struct {
	mu     sync.Mutex
	seen   map[string]bool
	dups   int
	first  time.Time
	last   time.Time
	server *http.Server
	url    string
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{seen: map[string]bool{}, url: "http://" + ln.Addr().String() + "/oncepay"}
	r.server = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		id, now := req.Header.Get("webhook-id"), time.Now()
		r.mu.Lock()
		if r.seen[id] {
			r.dups++
		} else {
			r.seen[id] = true
			if r.first.IsZero() {
				r.first = now
			}
			r.last = now
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go r.server.Serve(ln)
	return r, nil
}

func (r *receiver) count() (distinct, dups int, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen), r.dups, r.last
}

// Deliveries runs the delivery benchmark: a merchant, its API key and an
// endpoint at a receiver on loopback made with the binary's own commands;
// serve started with cfg.Serve; the new-payments load for cfg.Load's
// duration; then it waits for the backlog to drain (at most 5 minutes).
// The ledger is checked as every benchmark's is.
func Deliveries(ctx context.Context, cfg DeliveryConfig) (*DeliveryResult, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	db := filepath.Join(cfg.Dir, "deliveries.db")
	cli := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, cfg.Exe, append(args, "--db", db)...).Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%s: %w: %s", args[0], err, ee.Stderr)
			}
			return "", err
		}
		return lines[len(lines)-1], nil
	}
	scope, err := cli("merchant", "create", "bench")
	if err != nil {
		return nil, err
	}
	apiKey, err := cli("apikey", "create", "--merchant", scope)
	if err != nil {
		return nil, err
	}
	recv, err := newReceiver()
	if err != nil {
		return nil, err
	}
	defer recv.server.Close()
	if _, err := cli("endpoint", "add", "--merchant", scope, "--url", recv.url, "--allow-insecure-endpoints"); err != nil {
		return nil, err
	}

	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	token := "bench-admin-token-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-0123456789"
	args := append([]string{"serve", "--addr", addr, "--db", db, "--provider", "sim", "--allow-insecure-endpoints"}, cfg.Serve...)
	srv, err := startServe(ctx, cfg.Exe, filepath.Join(cfg.Dir, "serve.log"), "http://"+addr, []string{"ONCEPAY_ADMIN_TOKEN=" + token}, args...)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fmt.Fprintf(cfg.Progress, "$ %s %s\n", cfg.Exe, strings.Join(args, " "))

	res := &DeliveryResult{Serve: args}
	load := cfg.Load
	load.URL, load.APIKey, load.AdminToken, load.Scope, load.Scenario = srv.URL, apiKey, token, scope, New
	var startCount int
	load.Started = func() {
		res.windowStart = time.Now()
		startCount, _, _ = recv.count()
	}
	load.Stopped = func() {
		n, _, _ := recv.count()
		res.InWindow = n - startCount
		res.Backlog = Scrape(http.DefaultClient, srv.URL, token, "oncepay_deliveries_pending")
	}
	if res.Report, err = Run(ctx, load); err != nil {
		return nil, err
	}
	stopped := time.Now()
	res.Events = res.Statuses[http.StatusCreated]
	for deadline := stopped.Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if Scrape(http.DefaultClient, srv.URL, token, "oncepay_deliveries_pending") == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the backlog did not drain in 5 minutes")
		}
	}
	res.Received, res.Duplicates, res.Last = recv.count()
	res.Drain = max(res.Last.Sub(stopped), 0)
	if err := res.Check(ctx); err != nil {
		return nil, err
	}
	return res, srv.Stop()
}

// Write prints the result.
func (d *DeliveryResult) Write(w io.Writer) {
	d.Report.Write(w)
	fmt.Fprintf(w, "  events    %s delivered to one endpoint, each once (%d duplicates)\n", thousands(float64(d.Received)), d.Duplicates)
	fmt.Fprintf(w, "  delivered %s/s while the payments ran (%s of them); %s still pending when they stopped, delivered in %s after\n",
		thousands(d.DeliveryRate()), thousands(float64(d.InWindow)), thousands(d.Backlog), d.Drain.Round(time.Millisecond))
	fmt.Fprintf(w, "  overall   %s events/s from the first payment to the last event delivered\n", thousands(d.OverallRate()))
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServe runs serve and waits until url answers /healthz.
func startServe(ctx context.Context, exe, logPath, url string, env []string, args ...string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stderr, cmd.Env = logf, append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1), URL: url}
	go func() { s.done <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("serve exited before listening (%v); see %s", err, logPath)
		default:
		}
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			return s, nil
		}
	}
	s.Stop()
	return nil, fmt.Errorf("serve did not answer /healthz; see %s", logPath)
}

// Scrape reads one series from url's /metrics, asked with the admin
// token; -1 if it cannot.
func Scrape(c *http.Client, url, token, name string) float64 {
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}
