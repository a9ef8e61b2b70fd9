package model

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The models: the payment protocol, refunds racing on one payment, and the
// forward queue of payments taken offline.
const (
	modelFile   = "oncepay.pml"
	refundsFile = "refunds.pml"
	forwardFile = "forward.pml"
	deliverFile = "deliver.pml"
)

// A scope is one bound of the state space: how many clients, and how many
// crashes, provider faults and stalls the checker may spend (docs/proven.md,
// the bounds tables).
type scope struct {
	name    string
	defines []string // -D flags to spin
}

var (
	// twoClients is the model's defaults: two clients, two crashes, two
	// provider faults, one stall.
	twoClients = scope{"two-clients", nil}
	// twoClientsLive is twoClients with one provider fault: the liveness
	// search under weak fairness is several times the safety one.
	twoClientsLive = scope{"two-clients-live", []string{"-DMAXFAULTS=1"}}
	// threeClients races a third client, with one of each fault.
	threeClients = scope{"three-clients", []string{"-DNCLIENTS=3", "-DMAXCRASH=1", "-DMAXFAULTS=1", "-DMAXSTALL=1"}}
	// small has one of each fault: where the known-bad variants must fail
	// and the witnesses be reached, so a trail is found fast and stays short.
	small = scope{"small", []string{"-DMAXCRASH=1", "-DMAXFAULTS=1", "-DMAXSTALL=1"}}
)

// The ltl blocks of oncepay.pml.
var (
	safety   = []string{"one_charge", "answers_match", "no_stale_write"}
	liveness = []string{"settles", "clients_answered", "reservations_freed", "queue_empties", "delivery_ends"}
	// witnesses each claim a state the protocol does reach is unreachable:
	// a model that cannot pay, decline, take over or reconcile would pass
	// every property above and prove nothing.
	witnesses = []string{"reach_paid", "reach_declined", "reach_takeover_paid",
		"reach_reconcile_found", "reach_reconcile_not_completed"}
)

// variant is a known-wrong version of a model, one -D flag, and the
// properties spin must refute for it.
type variant struct {
	flag  string
	kills []string
}

// badVariants are the known-wrong versions of oncepay.pml.
var badVariants = []variant{
	{"PER_ATTEMPT_KEY", []string{"one_charge", "answers_match"}},
	{"NO_DEDUPE", []string{"one_charge"}},
	{"RECONCILE_GUESSES", []string{"answers_match"}},
	{"RELEASE_NO_FENCE", []string{"answers_match", "no_stale_write"}},
	{"STALL_BEFORE_CHARGE", []string{"answers_match"}},
	{"RECORD_NO_FENCE", []string{"no_stale_write"}},
	{"TAKEOVER_NO_FENCE_BUMP", []string{"no_stale_write"}},
	{"CLAIM_READ_THEN_INSERT", []string{"no_stale_write"}},
	{"NO_RECONCILE", []string{"settles"}},
	{"TAKEOVER_NULL_LEASE", []string{"settles", "clients_answered"}},
}

// refunds.pml: its scopes, properties, witnesses and known-bad variants.
var (
	// twoRefunds is its defaults: two refunds of 2 on a charge of 3, two
	// crashes, one provider fault, one stall.
	twoRefunds = scope{"two-refunds", nil}
	// twoRefundsFaults trades a crash for a second provider fault, at a
	// provider that keeps a refusal under its key as Stripe does (the
	// others are the sim's, which keeps nothing of a refusal).
	twoRefundsFaults = scope{"two-refunds-faults-stripe", []string{"-DMAXCRASH=1", "-DMAXFAULTS=2", "-DKEEPS_REFUSALS"}}
	// threeRefunds races a third refund, with one crash and one stall.
	threeRefunds = scope{"three-refunds", []string{"-DNREFUNDS=3", "-DMAXCRASH=1", "-DMAXFAULTS=0", "-DMAXSTALL=1"}}
	// twoRefundsLive has one of each fault: the liveness search visits
	// several times the states it stores.
	twoRefundsLive = scope{"two-refunds-live", small.defines}

	refundSafety    = []string{"within_charge", "one_refund_per_key", "answers_match", "books_balance", "refusals_honest"}
	refundWitnesses = []string{"reach_refunded", "reach_exceeds", "reach_declined_then_refunded",
		"reach_takeover_refunded", "reach_reconcile_found", "reach_reconcile_not_completed"}
	refundBadVariants = []variant{
		{"RESERVE_READ_THEN_UPDATE", []string{"within_charge", "books_balance"}},
		{"RECORD_KEEPS_RESERVATION", []string{"books_balance", "refusals_honest", "reservations_freed"}},
		{"RECORD_NO_FENCE", []string{"within_charge", "answers_match"}},
		{"PER_ATTEMPT_KEY", []string{"within_charge", "one_refund_per_key", "answers_match"}},
	}
)

// forward.pml: its scopes, properties, witnesses and known-bad variants.
var (
	// twoForwarders is its defaults: two forwarders, two crashes, two
	// provider faults, one stall. The liveness search is checked in it too.
	twoForwarders = scope{"two-forwarders", nil}
	// threeForwarders races a third forwarder, with one of each fault.
	threeForwarders = scope{"three-forwarders", []string{"-DNFWD=3", "-DMAXCRASH=1", "-DMAXFAULTS=1", "-DMAXSTALL=1"}}

	forwardSafety    = []string{"one_charge", "expired_uncharged", "status_matches"}
	forwardWitnesses = []string{"reach_charged", "reach_found_after_lost_answer", "reach_found_past_max_age",
		"reach_declined", "reach_expired"}
	forwardBadVariants = []variant{
		{"CLAIM_NO_FENCE", []string{"one_charge", "expired_uncharged", "status_matches"}},
		{"NO_LOOKUP_FIRST", []string{"one_charge", "expired_uncharged", "status_matches"}},
		{"SETTLE_NO_FENCE", []string{"status_matches"}},
		{"RELEASE_NO_FENCE", []string{"one_charge", "expired_uncharged", "status_matches"}},
		{"CHARGE_NEAR_EXPIRY", []string{"expired_uncharged"}},
		{"REACHED_NOT_SET_AT_CLAIM", []string{"one_charge", "status_matches"}},
		{"STALL_BEFORE_CHARGE", []string{"one_charge", "expired_uncharged", "status_matches"}},
		{"CLAIM_NULL_LEASE", []string{"queue_empties"}},
	}
)

// deliver.pml: its scopes, properties, witnesses and known-bad variants.
var (
	// twoDeliverers is its defaults without the operator: two deliverers,
	// two crashes, two refused or lost tries, one stall. The liveness
	// search is checked in it too.
	twoDeliverers = scope{"two-deliverers", []string{"-DMAXREDO=0"}}
	// withOperator adds the operator's Send again to two deliverers, with
	// one of each fault.
	withOperator = scope{"two-deliverers-and-an-operator", small.defines}
	// threeDeliverers races a third deliverer, with one of each fault.
	threeDeliverers = scope{"three-deliverers", []string{"-DNDLV=3", "-DMAXCRASH=1", "-DMAXFAULTS=1", "-DMAXSTALL=1", "-DMAXREDO=0"}}

	deliverSafety      = []string{"one_try_at_once", "delivered_true", "tries_honest", "no_stale_write"}
	deliverWitnesses   = []string{"reach_delivered", "reach_delivered_after_refusal", "reach_delivered_twice", "reach_failed", "reach_sent_again"}
	deliverBadVariants = []variant{
		{"CLAIM_NO_FENCE", []string{"tries_honest"}},
		{"FINISH_NO_FENCE", []string{"no_stale_write"}},
		{"STALL_BEFORE_SEND", []string{"one_try_at_once"}},
		{"ANY_ANSWER_DELIVERS", []string{"delivered_true"}},
		{"CLAIM_NULL_LEASE", []string{"delivery_ends"}},
	}
)

// TestModelHolds checks every property of the model exhaustively within
// each scope: no error, and a search that completed. A model's safety
// properties are checked in one search (ltl safe); each of them alone is
// what a bad variant must break.
func TestModelHolds(t *testing.T) {
	t.Parallel()
	tools := needTools(t)
	runs := []struct {
		file  string
		scope scope
		prop  string
		means string
	}{
		{modelFile, twoClients, "safe", strings.Join(safety, ", ")},
		{modelFile, threeClients, "safe", strings.Join(safety, ", ")},
		{modelFile, twoClientsLive, "settles", "settles"},
		{modelFile, twoClientsLive, "clients_answered", "clients_answered"},
		{refundsFile, twoRefunds, "safe", strings.Join(refundSafety, ", ")},
		{refundsFile, twoRefundsFaults, "safe", strings.Join(refundSafety, ", ")},
		{refundsFile, threeRefunds, "safe", strings.Join(refundSafety, ", ")},
		{refundsFile, twoRefundsLive, "reservations_freed", "reservations_freed"},
		{forwardFile, twoForwarders, "safe", strings.Join(forwardSafety, ", ")},
		{forwardFile, threeForwarders, "safe", strings.Join(forwardSafety, ", ")},
		{forwardFile, twoForwarders, "queue_empties", "queue_empties"},
		{deliverFile, twoDeliverers, "safe", strings.Join(deliverSafety, ", ")},
		{deliverFile, threeDeliverers, "safe", strings.Join(deliverSafety, ", ")},
		{deliverFile, twoDeliverers, "delivery_ends", "delivery_ends"},
		{deliverFile, withOperator, "safe", strings.Join(deliverSafety, ", ")},
		{deliverFile, withOperator, "delivery_ends", "delivery_ends"},
	}
	for _, r := range runs {
		t.Run(r.scope.name+"/"+r.prop, func(t *testing.T) {
			t.Parallel()
			res := tools.verify(t, r.file, r.scope.defines, r.prop, true)
			if res.errors != 0 || !res.complete {
				t.Fatalf("%s in %s: errors = %d, complete = %v, want 0 errors and a complete search\n%s\n%s",
					r.means, r.scope.name, res.errors, res.complete, res.tail(), lastLines(tools.replay(t, res), 80))
			}
			t.Logf("%s hold in %s: %d states stored, %d transitions, %.2fs search (%.2fs with spin and cc)",
				r.means, r.scope.name, res.states, res.transitions, res.elapsed, res.wall.Seconds())
		})
	}
}

// TestBadVariantsRefuted checks that spin finds a counterexample trail for
// every known-bad variant, so the properties can tell right from wrong.
func TestBadVariantsRefuted(t *testing.T) {
	t.Parallel()
	tools := needTools(t)
	for _, m := range []struct {
		file     string
		variants []variant
	}{{modelFile, badVariants}, {refundsFile, refundBadVariants}, {forwardFile, forwardBadVariants}, {deliverFile, deliverBadVariants}} {
		for _, v := range m.variants {
			for _, prop := range v.kills {
				t.Run(strings.TrimSuffix(m.file, ".pml")+"/"+v.flag+"/"+prop, func(t *testing.T) {
					t.Parallel()
					res := tools.verify(t, m.file, append([]string{"-D" + v.flag}, small.defines...), prop, false)
					if res.errors == 0 {
						t.Fatalf("%s passes %s: errors = 0, want a counterexample\n%s", v.flag, prop, res.tail())
					}
					steps := tools.replay(t, res)
					n := regexp.MustCompile(`trail ends after (\d+) steps`).FindStringSubmatch(steps)
					if n == nil {
						t.Fatalf("%s/%s: the trail does not replay in spin:\n%s", v.flag, prop, steps)
					}
					t.Logf("%s refutes %s: a %s-step trail after %d states, %.2fs search (%.2fs with spin and cc)",
						v.flag, prop, n[1], res.states, res.elapsed, res.wall.Seconds())
				})
			}
		}
	}
}

// TestModelReaches checks the models are not vacuous: spin reaches a paid
// answer, a decline, a takeover that pays, and both reconcile outcomes; a
// refund, a refusal, a decline whose reservation another refund then uses,
// a takeover that refunds, and both reconcile outcomes of a refund; a
// queued payment succeeded by a forwarder's charge, by the lookup after a
// lost answer and by the lookup past its max age, declined, and expired;
// an event delivered, delivered after a refused try, delivered a second
// time after a lost answer, given up, and delivered by an operator's Send
// again.
func TestModelReaches(t *testing.T) {
	t.Parallel()
	tools := needTools(t)
	for _, m := range []struct {
		file      string
		witnesses []string
	}{{modelFile, witnesses}, {refundsFile, refundWitnesses}, {forwardFile, forwardWitnesses}, {deliverFile, deliverWitnesses}} {
		for _, w := range m.witnesses {
			t.Run(strings.TrimSuffix(m.file, ".pml")+"/"+w, func(t *testing.T) {
				t.Parallel()
				res := tools.verify(t, m.file, small.defines, w, false)
				if res.errors == 0 {
					t.Fatalf("%s: spin never reached it (errors = 0): the model cannot get there\n%s", w, res.tail())
				}
				t.Logf("%s: reached after %d states", w, res.states)
			})
		}
	}
}

// tools are spin and a C compiler, and the pan verifiers built with them.
type tools struct {
	spin, cc string
	dir      string // holds one directory per build

	mu     sync.Mutex
	builds map[string]*build
}

type build struct {
	once sync.Once
	dir  string // the model file, pan.c and pan
	err  error
	took time.Duration
}

var (
	toolsOnce sync.Once
	shared    *tools
	toolsErr  error
)

// needTools returns spin and cc, or skips the test when spin is missing,
// except in CI, where scripts/test.sh installs it and a missing one fails.
func needTools(t *testing.T) *tools {
	t.Helper()
	toolsOnce.Do(func() {
		spin, err := exec.LookPath("spin")
		if err != nil {
			toolsErr = fmt.Errorf("spin not found (Debian package spin; scripts/test.sh installs it): %w", err)
			return
		}
		cc, err := exec.LookPath("cc")
		if err != nil {
			if cc, err = exec.LookPath("gcc"); err != nil {
				toolsErr = fmt.Errorf("no C compiler (cc or gcc) to build spin's verifier: %w", err)
				return
			}
		}
		dir, err := os.MkdirTemp("", "oncepay-model-")
		if err != nil {
			toolsErr = err
			return
		}
		shared = &tools{spin: spin, cc: cc, dir: dir, builds: map[string]*build{}}
	})
	if toolsErr != nil {
		if inCI() {
			t.Fatalf("%v; CI must run the model check", toolsErr)
		}
		t.Skipf("skipping the model check: %v", toolsErr)
	}
	return shared
}

func inCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// build returns the pan verifier for the model file under defines, safety-only
// or with fairness for liveness; it builds each one once. A search that
// runs long is worth an optimized build; one that stops at the first
// counterexample is not.
func (tl *tools) build(t *testing.T, file string, defines []string, live, optimize bool) *build {
	t.Helper()
	key := file + " " + strings.Join(defines, " ") + fmt.Sprintf(" live=%v opt=%v", live, optimize)
	tl.mu.Lock()
	b, ok := tl.builds[key]
	if !ok {
		b = &build{dir: filepath.Join(tl.dir, fmt.Sprintf("build%d", len(tl.builds)))}
		tl.builds[key] = b
	}
	tl.mu.Unlock()
	b.once.Do(func() {
		start := time.Now()
		defer func() { b.took = time.Since(start) }()
		src, err := os.ReadFile(file)
		if err != nil {
			b.err = err
			return
		}
		if err := os.MkdirAll(b.dir, 0o755); err != nil {
			b.err = err
			return
		}
		if err := os.WriteFile(filepath.Join(b.dir, file), src, 0o644); err != nil {
			b.err = err
			return
		}
		args := append([]string{"-a"}, defines...)
		if _, err := run(b.dir, tl.spin, append(args, file)...); err != nil {
			b.err = err
			return
		}
		ccArgs := []string{"-w", "-DMEMLIM=2048", "-o", "pan", "pan.c"}
		if optimize {
			ccArgs = append([]string{"-O2"}, ccArgs...)
		}
		if live {
			ccArgs = append([]string{"-DNFAIR=3"}, ccArgs...)
		} else {
			ccArgs = append([]string{"-DSAFETY"}, ccArgs...)
		}
		_, b.err = run(b.dir, tl.cc, ccArgs...)
	})
	if b.err != nil {
		t.Fatalf("build the verifier (%s): %v", key, b.err)
	}
	return b
}

// verify runs pan for the model file on the property prop in its own
// directory, where a counterexample leaves its trail.
func (tl *tools) verify(t *testing.T, file string, defines []string, prop string, optimize bool) panResult {
	t.Helper()
	start := time.Now()
	live := slices.Contains(liveness, prop)
	b := tl.build(t, file, defines, live, optimize)
	dir := t.TempDir()
	if err := os.Link(filepath.Join(b.dir, file), filepath.Join(dir, file)); err != nil {
		t.Fatal(err)
	}
	args := []string{"-m200000", "-n", "-N", prop}
	if live {
		args = append([]string{"-a", "-f"}, args...)
	}
	out, err := run(dir, filepath.Join(b.dir, "pan"), args...)
	if err != nil {
		t.Fatalf("pan %s: %v", strings.Join(args, " "), err)
	}
	res := parsePan(out)
	res.dir, res.file, res.defines, res.wall = dir, file, defines, time.Since(start)
	if res.errors < 0 || res.states < 0 {
		t.Fatalf("pan %s: cannot read its report:\n%s", strings.Join(args, " "), out)
	}
	return res
}

// replay plays a counterexample trail back through spin, if there is one.
func (tl *tools) replay(t *testing.T, res panResult) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(res.dir, res.file+".trail")); err != nil {
		return "(no trail)"
	}
	args := append([]string{"-t"}, res.defines...)
	out, err := run(res.dir, tl.spin, append(args, res.file)...)
	if err != nil {
		return fmt.Sprintf("spin -t: %v\n%s", err, out)
	}
	return out
}

// run runs name in dir and returns its output; no check takes minutes.
func run(dir, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, lastLines(out.String(), 30))
	}
	return out.String(), nil
}

// panResult is what one pan run reported.
type panResult struct {
	errors      int     // -1 if not reported
	states      int64   // states stored, -1 if not reported
	transitions int64   // stored + matched
	elapsed     float64 // pan's own search time, seconds
	complete    bool    // no "Search not completed", no depth or memory limit hit
	out         string

	dir     string
	file    string
	defines []string
	wall    time.Duration
}

var (
	errorsRE      = regexp.MustCompile(`errors: (\d+)`)
	statesRE      = regexp.MustCompile(`(\d+) states, stored`)
	transitionsRE = regexp.MustCompile(`(\d+) transitions \(= (?:stored|visited)\+matched\)`)
	elapsedRE     = regexp.MustCompile(`pan: elapsed time ([0-9.e+-]+) seconds`)
)

func parsePan(out string) panResult {
	res := panResult{errors: -1, states: -1, out: out}
	if m := errorsRE.FindStringSubmatch(out); m != nil {
		res.errors, _ = strconv.Atoi(m[1])
	}
	if m := statesRE.FindStringSubmatch(out); m != nil {
		res.states, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := transitionsRE.FindStringSubmatch(out); m != nil {
		res.transitions, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := elapsedRE.FindStringSubmatch(out); m != nil {
		res.elapsed, _ = strconv.ParseFloat(m[1], 64)
	}
	res.complete = !strings.Contains(out, "Search not completed") &&
		!strings.Contains(out, "max search depth too small") &&
		!strings.Contains(out, "out of memory")
	return res
}

func (r panResult) tail() string { return lastLines(r.out, 40) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func TestParsePan(t *testing.T) {
	out := `pan: ltl formula settles
(Spin Version 6.5.2 -- 6 December 2019)
State-vector 104 byte, depth reached 215, errors: 0
   703641 states, stored (2.78958e+06 visited)
  4125112 transitions (= stored+matched)
pan: elapsed time 1.8 seconds
`
	got := parsePan(out)
	if got.errors != 0 || got.states != 703641 || got.transitions != 4125112 || got.elapsed != 1.8 || !got.complete {
		t.Errorf("parsePan = %+v, want 0 errors, 703641 states, 4125112 transitions, 1.8s, complete", got)
	}
	got = parsePan("Warning: Search not completed\nState-vector 96 byte, depth reached 43, errors: 1\n       24 states, stored\n")
	if got.errors != 1 || got.complete {
		t.Errorf("parsePan(counterexample) = %+v, want 1 error, incomplete", got)
	}
	got = parsePan("error: max search depth too small\nState-vector 96 byte, depth reached 43, errors: 0\n       24 states, stored\n")
	if got.complete {
		t.Errorf("parsePan(depth limit) complete = true, want false")
	}
}
