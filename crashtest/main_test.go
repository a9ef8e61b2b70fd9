package crashtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// oncepay is the binary under test, built once by TestMain.
var oncepay string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// buildAndRun builds oncepay with its crash points compiled in, then runs
// the tests. The children are built without -race even when the tests run
// with it: they would only start and die more slowly.
func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "oncepay-crashtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	oncepay = filepath.Join(dir, "oncepay")
	build := exec.Command("go", "build", "-tags", "crashpoints", "-o", oncepay, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest: build oncepay: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// timing is the lease arithmetic a server runs with.
type timing struct {
	providerTimeout, lease, staleAfter time.Duration
}

// fast lets a killed owner's claim be taken over or reconciled within a
// second, so a test can crash hundreds of times.
var fast = timing{providerTimeout: 200 * time.Millisecond, lease: 500 * time.Millisecond, staleAfter: 500 * time.Millisecond}

// slowBank is fast's leases with a provider timeout a loaded machine
// cannot miss: for tests whose premise is a call that reached the bank.
var slowBank = timing{providerTimeout: time.Second, lease: 1500 * time.Millisecond, staleAfter: 1500 * time.Millisecond}

func (tm timing) flags() []string {
	return []string{"--provider-timeout", tm.providerTimeout.String(), "--lease", tm.lease.String(), "--stale-after", tm.staleAfter.String()}
}

// expired waits until every lease taken before the call has run out and
// every attempt claimed before it is stale: reconcile settles only those.
func (tm timing) expired() {
	time.Sleep(max(tm.lease, tm.staleAfter) + 100*time.Millisecond)
}

// child is a running oncepay process.
type child struct {
	cmd  *exec.Cmd
	url  string     // where it listens, from its "listening" log line
	logs *logBuffer // everything it logged
	done chan struct{}
	err  error // what Wait returned; read it only after done is closed
}

// start runs oncepay with args and the extra environment, waits until it
// listens, and kills it when the test ends.
func start(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	return startProgram(t, []string{oncepay}, 15*time.Second, env, args...)
}

// startProgram is start with another oncepay binary, given within to
// listen: prog is its path, or an emulator and its path (the edge builds
// under qemu).
func startProgram(t *testing.T, prog []string, within time.Duration, env []string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(prog[0], append(prog[1:], args...)...), logs: newLogBuffer(), done: make(chan struct{})}
	c.cmd.Env = append(cleanEnv(), env...)
	c.cmd.Stderr = c.logs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill() // an error only says it is already gone
		<-c.done
	})
	select {
	case c.url = <-c.logs.url:
		return c
	case <-c.done:
		t.Fatalf("oncepay %s exited before listening: %v\n%s", args[0], c.err, c.logs)
	case <-time.After(within):
		t.Fatalf("oncepay %s did not listen within %v:\n%s", args[0], within, c.logs)
	}
	return nil
}

// startSim runs the simulated provider as its own process, with its ledger
// in dir, so the ledger outlives every oncepay it serves. extra flags come
// last.
func startSim(t *testing.T, dir string, latency time.Duration, extra ...string) (sim *child, ledger string) {
	t.Helper()
	ledger = filepath.Join(dir, "ledger.db")
	args := []string{"sim-provider", "--addr", "127.0.0.1:0", "--db", ledger, "--sim-latency", latency.String()}
	return start(t, nil, append(args, extra...)...), ledger
}

// startServe runs oncepay serve on db against the provider at simURL.
// extra flags come last, so they win over the ones set here. The circuit
// breaker is off unless a test turns it on (the offline tests): these
// tests give the provider 200 ms a call, which a loaded machine sometimes
// misses three times in a row, and a breaker opened by the machine's load
// would answer 503 to calls the test needs made.
func startServe(t *testing.T, db, simURL string, tm timing, env []string, extra ...string) *child {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--provider", simURL, "--link-failures", "0"}, tm.flags()...)
	return start(t, env, append(args, extra...)...)
}

// crashEnv arms the crash point with the chance prob per pass.
func crashEnv(point string, prob float64) []string {
	return []string{"ONCEPAY_CRASH_POINT=" + point, fmt.Sprintf("ONCEPAY_CRASH_PROB=%g", prob)}
}

// exit waits up to d for c to exit on its own and reports whether SIGKILL
// ended it.
func (c *child) exit(t *testing.T, d time.Duration) (sigkilled bool) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Fatalf("oncepay still running after %v", d)
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// kill SIGKILLs c and fails the test if c had already died another way.
func (c *child) kill(t *testing.T) {
	t.Helper()
	c.cmd.Process.Kill() // an error only says it is already gone
	if !c.exit(t, 10*time.Second) {
		t.Fatalf("oncepay had already exited (%v) before it was killed:\n%s", c.err, c.logs)
	}
}

// logged reports whether c logs a line holding every one of parts within
// 5s: its stderr reaches the test through a pipe, behind its answers.
func (c *child) logged(parts ...string) bool {
	for range 500 {
		for _, line := range strings.Split(c.logs.String(), "\n") {
			if containsAll(line, parts) {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// cleanEnv is the test's environment without ONCEPAY_* variables, so a
// developer's settings cannot leak into a child.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ONCEPAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// runCLI runs a one-shot oncepay command and returns its standard output.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(oncepay, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("oncepay %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// merchant is a merchant with one API key: its id is the scope of its
// payments.
type merchant struct{ scope, secret string }

// createAPIKey makes a merchant in db with "oncepay merchant create" (its id
// alone on the last line) and a key of it with "oncepay apikey create
// --merchant" (the secret alone on the last line).
func createAPIKey(t *testing.T, db string) merchant {
	t.Helper()
	last := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}
	m := merchant{scope: last(runCLI(t, "merchant", "create", "crashtest", "--db", db))}
	m.secret = last(runCLI(t, "apikey", "create", "--merchant", m.scope, "--db", db))
	return m
}

// logBuffer keeps what a child logs and hands over the URL of its "listening"
// line (JSON from serve, text from sim-provider).
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	url   chan string
	found bool
}

var listeningURL = regexp.MustCompile(`listening.*?"?url"?[=:]"?(http://[^"\s]+)`)

func newLogBuffer() *logBuffer { return &logBuffer{url: make(chan string, 1)} }

func (s *logBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if !s.found {
		if m := listeningURL.FindSubmatch(s.buf.Bytes()); m != nil {
			s.found = true
			s.url <- string(m[1])
		}
	}
	return len(p), nil
}

func (s *logBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
