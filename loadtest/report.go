package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Report is what a run saw and, after Check, what the ledger says of it.
type Report struct {
	Scenario    Scenario
	Connections int
	Elapsed     time.Duration // the measured phase
	Requests    int           // answered in the measured phase
	Statuses    map[int]int   // answers by HTTP status
	Errors      int           // requests that got no answer
	FirstError  error
	Latency     Latencies
	Storm       *StormStats   // storm runs only
	ClientCPU   time.Duration // this process's CPU time in the measured phase (Linux); 0 if unknown

	Keys    int  // idempotency keys sent, set up included
	Charged int  // of those, keys the ledger holds a charge for; set by Check
	Checked bool // Check ran

	cfg  Config
	keys map[string]*keyObs
	bad  violations
}

// merge combines the workers' records: timed ones count in the figures,
// set-up ones only in the invariants.
func (r *Report) merge(timed, setup []*recorder) {
	r.Statuses = map[int]int{}
	r.keys = map[string]*keyObs{}
	var lat []time.Duration
	for _, rec := range timed {
		lat = append(lat, rec.lat...)
		for s, n := range rec.statuses {
			r.Statuses[s] += n
			r.Requests += n
		}
		r.Errors += rec.errors
		if r.FirstError == nil {
			r.FirstError = rec.firstErr
		}
	}
	for _, rec := range append(slices.Clip(timed), setup...) {
		r.bad.addAll(rec.bad)
		for key, o := range rec.keys {
			if have := r.keys[key]; have != nil {
				have.merge(o, key, &r.bad)
			} else {
				r.keys[key] = o
			}
		}
	}
	r.Latency = percentiles(lat)
	r.Keys = len(r.keys)
}

// Throughput is answered requests per second.
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// ServerErrors counts 5xx answers: a 503 is allowed (a busy database, an
// unknown provider outcome) but none is expected under a healthy provider.
func (r *Report) ServerErrors() int {
	var n int
	for s, c := range r.Statuses {
		if s >= 500 {
			n += c
		}
	}
	return n
}

// Violations is how many broken invariants the run found.
func (r *Report) Violations() int { return r.bad.n }

// ViolationMessages describes the first few broken invariants.
func (r *Report) ViolationMessages() []string { return r.bad.msgs }

// Check reads the simulated provider's ledger (GET /sim/charges) and
// verifies every key the run sent: at most one charge per downstream key,
// every 201 names the ledger's charge for its key, and at most one 201 per
// key came without Idempotent-Replayed. Broken invariants are counted in
// Violations; an error means the check could not be made.
func (r *Report) Check(ctx context.Context) error {
	ledger, err := fetchLedger(ctx, r.cfg)
	if err != nil {
		return err
	}
	for dk, ids := range ledger {
		if len(ids) > 1 {
			r.bad.add("downstream key %s: %d charges %v, want at most 1", dk, len(ids), ids)
		}
	}
	r.Charged = 0
	for key, o := range r.keys {
		ids := ledger[payment.DownstreamKey(r.cfg.Scope, key)]
		if len(ids) > 0 {
			r.Charged++
		}
		if o.fresh > 1 {
			r.bad.add("key %s: %d 201s without Idempotent-Replayed, want at most 1", key, o.fresh)
		}
		switch {
		case !o.created:
		case len(ids) == 0:
			r.bad.add("key %s: the 201 names charge %s; the ledger has none for this key (is --scope right?)", key, o.chargeID)
		case ids[0] != o.chargeID:
			r.bad.add("key %s: the 201 names charge %s; the ledger has %s", key, o.chargeID, ids[0])
		}
	}
	r.Checked = true
	return nil
}

// fetchLedger returns the charge ids of the ledger by downstream key.
func fetchLedger(ctx context.Context, cfg Config) (map[string][]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL+"/sim/charges", nil)
	if err != nil {
		return nil, err
	}
	if cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("loadtest: read the ledger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("loadtest: GET /sim/charges: %s %s (is the provider the simulated one?)", resp.Status, b)
	}
	var body struct {
		Data []struct {
			ID             string `json:"id"`
			IdempotencyKey string `json:"idempotency_key"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("loadtest: decode the ledger: %w", err)
	}
	ledger := make(map[string][]string, len(body.Data))
	for _, c := range body.Data {
		ledger[c.IdempotencyKey] = append(ledger[c.IdempotencyKey], c.ID)
	}
	return ledger, nil
}

// Write prints the report for a person.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "%s: %s requests in %s over %d connections: %s/s\n",
		r.Scenario, thousands(float64(r.Requests)), r.Elapsed.Round(time.Millisecond), r.Connections, thousands(r.Throughput()))
	fmt.Fprintf(w, "  latency   p50 %s  p95 %s  p99 %s  max %s\n",
		ms(r.Latency.P50), ms(r.Latency.P95), ms(r.Latency.P99), ms(r.Latency.Max))
	fmt.Fprintf(w, "  statuses  %s\n", r.statusLine())
	if r.ClientCPU > 0 && r.Requests > 0 {
		fmt.Fprintf(w, "  cpu       load tool %s, %s per request\n", r.ClientCPU.Round(time.Millisecond), micros(r.ClientCPU/time.Duration(r.Requests)))
	}
	if r.Errors > 0 {
		fmt.Fprintf(w, "  errors    %d requests got no answer; the first: %v\n", r.Errors, r.FirstError)
	}
	if s := r.Storm; s != nil {
		fmt.Fprintf(w, "  storm     %d rounds of %d requests on one key: all answered in p50 %s, max %s\n",
			s.Rounds, s.Size, ms(s.P50), ms(s.Max))
	}
	if r.Checked {
		fmt.Fprintf(w, "  ledger    %s keys sent, %s charged, %d invariant violations\n",
			thousands(float64(r.Keys)), thousands(float64(r.Charged)), r.Violations())
	} else {
		fmt.Fprintf(w, "  ledger    not checked; %d violations seen in the answers\n", r.Violations())
	}
	for _, m := range r.ViolationMessages() {
		fmt.Fprintf(w, "  VIOLATION %s\n", m)
	}
	if n := r.Violations() - len(r.ViolationMessages()); n > 0 {
		fmt.Fprintf(w, "  VIOLATION ... and %d more\n", n)
	}
}

func (r *Report) statusLine() string {
	codes := make([]int, 0, len(r.Statuses))
	for s := range r.Statuses {
		codes = append(codes, s)
	}
	slices.Sort(codes)
	parts := make([]string, len(codes))
	for i, s := range codes {
		parts[i] = fmt.Sprintf("%d: %d", s, r.Statuses[s])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "  ")
}

// ms formats d in milliseconds, with precision where it matters.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return fmt.Sprintf("%.2fms", f)
	}
	return fmt.Sprintf("%.0fms", f)
}

// micros formats d in microseconds.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}

// thousands formats f, not negative, rounded and with thousands
// separators: 15,234.
func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
