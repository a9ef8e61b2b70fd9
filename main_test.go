package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestHelpListsFlagsWithEnv(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--help"}, env(nil), io.Discard, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"--addr (ONCEPAY_ADDR, default 127.0.0.1:8080)", "ONCEPAY_SIM_FAIL_AFTER_CHARGE", "ONCEPAY_PROVIDER_TIMEOUT"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stderr.String())
		}
	}
}

// apikey create prints the secret alone on the last line; the store keeps
// only its hash; the flag wins over the environment.
func TestAPIKeyCommands(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "keys.db")
	getenv := env(map[string]string{"ONCEPAY_DB": filepath.Join(dir, "not-this.db")})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"apikey", "create", "Corner Shop", "--db", dbPath}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	secret := lines[len(lines)-1]
	if !strings.HasPrefix(secret, "opk_") || strings.Contains(secret, " ") {
		t.Fatalf("last line = %q, want the secret alone", secret)
	}
	raw, err := readFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Errorf("the database file contains the secret in clear")
	}
	out.Reset()
	if err := run(context.Background(), []string{"apikey", "list"}, env(map[string]string{"ONCEPAY_DB": dbPath}), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Corner Shop") || strings.Contains(out.String(), secret) {
		t.Errorf("list = %q, want the name and never the secret", out.String())
	}
	id := strings.Fields(strings.Split(out.String(), "\n")[1])[0]
	if err := run(context.Background(), []string{"apikey", "revoke", id, "--db", dbPath}, env(nil), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"apikey", "revoke", id, "--db", dbPath}, env(nil), io.Discard, io.Discard); err == nil {
		t.Errorf("revoking twice succeeded")
	}
}

// merchant create prints the id alone on the last line; a merchant has any
// number of keys, listed with it; a key of an unknown merchant is refused.
func TestMerchantCommands(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "keys.db")
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(args, "--db", dbPath), env(nil), &out, io.Discard)
		return out.String(), err
	}
	last := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}
	out, err := cli("merchant", "create", "Corner Shop")
	merchant := last(out)
	if err != nil || !strings.HasPrefix(merchant, "mer_") {
		t.Fatalf("merchant create = %q, %v; want the id alone on the last line", out, err)
	}
	var secrets []string
	for _, name := range []string{"till", "web"} {
		out, err := cli("apikey", "create", "--merchant", merchant, "--name", name)
		if err != nil || !strings.HasPrefix(last(out), "opk_") {
			t.Fatalf("apikey create --merchant = %q, %v", out, err)
		}
		secrets = append(secrets, last(out))
	}
	if secrets[0] == secrets[1] {
		t.Errorf("two keys share a secret")
	}
	if out, err := cli("apikey", "create", "--merchant", "mer_nosuch"); err == nil || !strings.Contains(err.Error(), "mer_nosuch") {
		t.Errorf("apikey create for an unknown merchant = %q, %v; want an error naming it", out, err)
	}
	if out, err := cli("apikey", "create"); err == nil {
		t.Errorf("apikey create with neither NAME nor --merchant = %q, want a usage error", out)
	}
	out, _ = cli("apikey", "list")
	if strings.Count(out, merchant) != 2 || !strings.Contains(out, "till") || !strings.Contains(out, "web") {
		t.Errorf("apikey list = %q, want both keys of %s", out, merchant)
	}
	out, _ = cli("merchant", "list")
	if !strings.Contains(out, merchant) || !strings.Contains(out, "Corner Shop") || !strings.HasSuffix(strings.TrimSpace(out), " 2         off") {
		t.Errorf("merchant list = %q, want Corner Shop with 2 live keys, offline off", out)
	}
	// Offline limits: set, shown, refused past the provider's key window
	// (naming both figures), turned off.
	if _, err := cli("merchant", "offline", merchant, "--max-amount", "5000", "--max-total", "20000", "--max-age", "12h"); err != nil {
		t.Fatalf("merchant offline: %v", err)
	}
	if out, _ = cli("merchant", "list"); !strings.HasSuffix(strings.TrimSpace(out), "5000 / 20000 / 12h0m0s") {
		t.Errorf("merchant list = %q, want the offline limits", out)
	}
	if _, err := cli("merchant", "offline", merchant, "--max-amount", "5000", "--max-total", "20000", "--max-age", "25h"); err == nil ||
		!strings.Contains(err.Error(), "25h0m0s") || !strings.Contains(err.Error(), "24h0m0s") {
		t.Errorf("merchant offline --max-age 25h: err = %v, want a refusal naming 25h and the 24h window", err)
	}
	if _, err := cli("merchant", "offline", "mer_nobody", "--max-amount", "5000", "--max-total", "20000", "--max-age", "1h"); err == nil {
		t.Error("merchant offline of an unknown merchant: no error")
	}
	if _, err := cli("merchant", "offline", merchant, "--disable"); err != nil {
		t.Fatal(err)
	}
	if out, _ = cli("merchant", "list"); !strings.HasSuffix(strings.TrimSpace(out), " off") {
		t.Errorf("merchant list after --disable = %q, want off", out)
	}
	// The form from before merchants makes a merchant with one key.
	out, err = cli("apikey", "create", "Old Style")
	if err != nil || !strings.HasPrefix(last(out), "opk_") {
		t.Fatalf("apikey create NAME = %q, %v", out, err)
	}
	if out, _ := cli("merchant", "list"); !strings.Contains(out, "Old Style") {
		t.Errorf("merchant list = %q, want the merchant apikey create NAME made", out)
	}
	// Made again under a taken name, it warns that this is no rotation.
	var warning bytes.Buffer
	if err := run(context.Background(), []string{"apikey", "create", "Corner Shop", "--db", dbPath}, env(nil), io.Discard, &warning); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warning.String(), "apikey create --merchant "+merchant) {
		t.Errorf("stderr = %q, want a warning pointing at --merchant %s", warning.String(), merchant)
	}
}

// demo serves on the address it is given and stops cleanly when its
// context ends.
func TestDemoServesAndStops(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "d.db")}, env(nil), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("demo printed nothing: %v (%v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	url := strings.Fields(line)[2]
	req, _ := http.NewRequest("POST", url+"/v1/payments", strings.NewReader(`{"amount":1000,"currency":"EUR","source":"tok_visa"}`))
	req.Header.Set("Idempotency-Key", "demo-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("demo payment = %d, want 201", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("demo did not stop")
	}
}

// demo has no credentials at all, so it listens on loopback only: on any
// other address (an empty host is every address) it refuses to start.
func TestDemoRefusesPublicAddress(t *testing.T) {
	db := filepath.Join(t.TempDir(), "d.db")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a demo that starts stops
		err := run(ctx, []string{"demo", "--addr", addr, "--db", db}, env(nil), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--public") {
			t.Errorf("demo --addr %s = %v, want an error naming --public", addr, err)
		}
	}
}

func TestLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true}, {"127.3.2.1:8080", true}, {"[::1]:8080", true}, {"localhost:8080", true},
		{"LocalHost:0", true}, {"[::ffff:127.0.0.1]:8080", true},
		{":8080", false}, {"0.0.0.0:8080", false}, {"[::]:8080", false}, {"192.168.1.10:8080", false},
		{"[2001:db8::1]:8080", false}, {"oncepay.example:8080", false}, {"127.0.0.1", false},
	} {
		if got := loopback(tt.addr); got != tt.want {
			t.Errorf("loopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// With --public (here ONCEPAY_PUBLIC) demo listens on every address, and
// warns before it does, naming what is open.
func TestDemoPublicWarns(t *testing.T) {
	var help bytes.Buffer
	run(context.Background(), []string{"demo", "--help"}, env(nil), io.Discard, &help)
	if !strings.Contains(help.String(), "--public (ONCEPAY_PUBLIC, default false)") {
		t.Errorf("demo --help lacks --public:\n%s", help.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := []string{"demo", "--addr", ":0", "--db", filepath.Join(t.TempDir(), "d.db")}
		done <- run(ctx, args, env(map[string]string{"ONCEPAY_PUBLIC": "true"}), io.Discard, pw)
		pw.Close()
	}()
	var warning string
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.Contains(sc.Text(), "msg=listening") {
		if strings.Contains(sc.Text(), "level=WARN") {
			warning = sc.Text()
		}
	}
	go io.Copy(io.Discard, pr)
	for _, want := range []string{"admin page", "ledger", "fault knobs", "payments without a key", "addr=:0"} {
		if !strings.Contains(warning, want) {
			t.Errorf("warning before listening = %q, want it to name %q", warning, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v, want nil after shutdown", err)
	}
}

// A port already taken is an error from run, not a log line.
func TestServeTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = run(context.Background(), []string{"serve", "--addr", ln.Addr().String(), "--db", filepath.Join(t.TempDir(), "s.db")}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("run = %v, want address already in use", err)
	}
}

// provider-timeout < lease < stale-after, or serve refuses to start.
func TestTimeoutsMustNest(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "5s", "--provider-timeout", "10s"}, "--lease"},
		{[]string{"--lease", "10s", "--provider-timeout", "10s"}, "--lease"},
		{[]string{"--lease", "1m", "--stale-after", "30s"}, "--stale-after"},
	} {
		err := run(context.Background(), append([]string{"serve", "--db", filepath.Join(t.TempDir(), "s.db")}, tt.args...), env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("serve %v = %v, want a %s error", tt.args, err, tt.want)
		}
	}
}

// serve on the simulated provider says loudly that no real money moves.
func TestServeWarnsOfSimulatedProvider(t *testing.T) {
	logs := serveLogs(t, []string{"--db", filepath.Join(t.TempDir(), "s.db")})
	if !strings.Contains(logs, "SIMULATED PROVIDER: no real money moves") || !strings.Contains(logs, `"level":"WARN"`) {
		t.Errorf("serve logs lack the simulated-provider warning:\n%s", logs)
	}
	if !strings.Contains(logs, "admin page closed") {
		t.Errorf("serve logs do not say how to open the admin page:\n%s", logs)
	}
}

func readFile(path string) ([]byte, error) {
	var all []byte
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		all = append(all, b...)
	}
	return all, nil
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, env(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "oncepay ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("version = %q, want oncepay and the Go version", out.String())
	}
}

// backup copies a database the server has open into a single valid file.
func TestBackupCommand(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "live.db")
	if err := run(context.Background(), []string{"apikey", "create", "shop", "--db", dbPath}, env(nil), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "copy.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"backup", "--db", dbPath, "--to", to}, env(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"apikey", "list", "--db", to}, env(nil), &out, io.Discard); err != nil || !strings.Contains(out.String(), "shop") {
		t.Errorf("the copy lists %q (%v), want the key", out.String(), err)
	}
	if err := run(context.Background(), []string{"backup", "--db", dbPath, "--to", to}, env(nil), io.Discard, io.Discard); err == nil {
		t.Errorf("backup over an existing file succeeded")
	}
}

// Each job's schedule can be turned off (for systemd timers); a bad one is
// an error, not a job that never runs.
func TestJobSchedules(t *testing.T) {
	for _, tt := range []struct {
		reconcile, purge string
		entries          int
		err              bool
	}{
		{"@every 1m", "@every 10m", 2, false},
		{"off", "@every 10m", 1, false},
		{"off", "off", 0, false},
		{"every minute", "off", 0, true},
	} {
		cfg := &config{reconcileSchedule: tt.reconcile, purgeSchedule: tt.purge, sweepSchedule: "off", offline: offlineConfig{forwardSchedule: "off"},
			delivery: deliveryConfig{schedule: "off"}}
		c, err := startJobs(context.Background(), slog.New(slog.DiscardHandler), cfg, &payment.Reconciler{}, &payment.Purger{}, &payment.Inbox{},
			&payment.Forwarder{}, &payment.Deliverer{})
		if (err != nil) != tt.err {
			t.Errorf("schedules %q, %q: err = %v, want error %v", tt.reconcile, tt.purge, err, tt.err)
			continue
		}
		if err == nil {
			if got := len(c.Entries()); got != tt.entries {
				t.Errorf("schedules %q, %q: %d jobs, want %d", tt.reconcile, tt.purge, got, tt.entries)
			}
			<-c.Stop().Done()
		}
	}
}

// A retention of zero would forget every key at once: purge and serve
// refuse it, and a zero event retention, at construction.
func TestBadRetentionRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	for _, args := range [][]string{
		{"purge", "--db", db, "--retention", "0s"},
		{"serve", "--db", db, "--retention", "0s", "--addr", "127.0.0.1:0"},
	} {
		err := run(context.Background(), args, env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--retention") {
			t.Errorf("%v = %v, want an error naming --retention", args, err)
		}
	}
	// An event retention of zero would forget every processed event at once.
	for _, tt := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"purge", "--db", db, "--event-retention", "0s"}, nil},
		{[]string{"purge", "--db", db}, map[string]string{"ONCEPAY_EVENT_RETENTION": "-1h"}},
		{[]string{"serve", "--db", db, "--addr", "127.0.0.1:0"}, map[string]string{"ONCEPAY_EVENT_RETENTION": "0s"}},
	} {
		err := run(context.Background(), tt.args, env(tt.env), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--event-retention") {
			t.Errorf("%v with %v = %v, want an error naming --event-retention", tt.args, tt.env, err)
		}
	}
}

// The admin token comes from the environment, a flag or a file (what a
// systemd credential is), never two at once; serve refuses one too short
// to be a secret (in characters: 17 two-byte ones are 17), blank, with
// whitespace or a control character inside, or in a file others can read.
func TestAdminTokenSources(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "s.db")
	const token = "0123456789abcdef0123456789abcdef" // 32 characters
	file := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short-token")
	os.WriteFile(short, []byte("a\n"), 0o600)
	empty := filepath.Join(dir, "empty-token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	shared := filepath.Join(dir, "shared-token")
	os.WriteFile(shared, []byte(token+"\n"), 0o600)
	os.Chmod(shared, 0o644)
	group := filepath.Join(dir, "group-token")
	os.WriteFile(group, []byte(token+"\n"), 0o600)
	os.Chmod(group, 0o640)
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"one-character flag", []string{"--admin-token", "a"}, nil, "at least 32"},
		{"31 characters in the environment", nil, map[string]string{"ONCEPAY_ADMIN_TOKEN": token[1:]}, "at least 32"},
		{"short file", []string{"--admin-token-file", short}, nil, "at least 32"},
		{"empty file", []string{"--admin-token-file", empty}, nil, "empty"},
		{"missing file", []string{"--admin-token-file", filepath.Join(dir, "nothing")}, nil, "--admin-token-file"},
		{"token and file", []string{"--admin-token-file", file}, map[string]string{"ONCEPAY_ADMIN_TOKEN": token}, "both set"},
		{"34 spaces", []string{"--admin-token", strings.Repeat(" ", 34)}, nil, "blank"},
		{"17 two-byte characters", []string{"--admin-token", strings.Repeat("é", 17)}, nil, "17 characters, want at least 32"},
		{"a space inside", []string{"--admin-token", token[:16] + " " + token[16:]}, nil, "whitespace or a control character (U+0020) inside"},
		{"a tab inside", nil, map[string]string{"ONCEPAY_ADMIN_TOKEN": token[:16] + "\t" + token[16:]}, "(U+0009) inside"},
		{"DEL inside", []string{"--admin-token", token + "\x7f" + token}, nil, "(U+007F) inside"},
		{"not UTF-8", []string{"--admin-token", token + "\xff"}, nil, "not valid UTF-8"},
		{"file others can read", []string{"--admin-token-file", shared}, nil, shared + " is mode 0644: group or others have access to it; make it its owner's only: chmod 600 " + shared},
		{"file the group can read", []string{"--admin-token-file", group}, nil, "mode 0640"},
	} {
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, tt.args...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a serve that starts stops
		err := run(ctx, args, env(tt.env), io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: run = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}

	// From the file, trailing newline and all, it opens the admin surface.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db}, env(map[string]string{"ONCEPAY_ADMIN_TOKEN_FILE": file}), io.Discard, pw)
		pw.Close()
	}()
	var url string
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		var line struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
			url = line.URL
		}
	}
	go io.Copy(io.Discard, pr)
	if url == "" {
		t.Fatalf("serve did not start: %v", <-done)
	}
	for _, tt := range []struct {
		token string
		want  int
	}{{token, 200}, {token + "x", 401}} {
		req, _ := http.NewRequest("GET", url+"/v1/attempts", nil)
		req.Header.Set("Authorization", "Bearer "+tt.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET /v1/attempts with token %q... = %d, want %d", tt.token[:4], resp.StatusCode, tt.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v, want nil after shutdown", err)
	}
}

// The token is trimmed wherever it comes from, and counted in characters:
// 32 two-byte ones are enough.
func TestAdminTokenTrimmedAndCountedInCharacters(t *testing.T) {
	for _, tok := range []string{" \t0123456789abcdef0123456789abcdef\n", strings.Repeat("é", 32)} {
		c := config{adminToken: tok}
		if err := c.readAdminToken(true); err != nil || c.adminToken != strings.TrimSpace(tok) {
			t.Errorf("readAdminToken(%q) = %v, token %q, want nil, %q", tok, err, c.adminToken, strings.TrimSpace(tok))
		}
	}
}

// "oncepay purge" deletes the inbox's final events past --event-retention
// with the attempts, and says how many.
func TestPurgeCommandPurgesEvents(t *testing.T) {
	ctx := context.Background()
	cfg := config{db: filepath.Join(t.TempDir(), "p.db"), maxBatch: 1}
	db, err := cfg.openStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for id, state := range map[string]payment.EventState{"evt_done": payment.EventProcessed, "evt_failed": payment.EventFailedState} {
		e := payment.InboxEvent{Event: payment.Event{Provider: "sim", ID: id, Type: "charge.succeeded"}, State: payment.EventReceived, ReceivedAt: old, UpdatedAt: old}
		if ok, err := db.ReceiveEvent(ctx, &e); !ok || err != nil {
			t.Fatal(ok, err)
		}
		fence, ok, err := db.BeginEvent(ctx, "sim", id, 0, old, old.Add(time.Minute))
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := db.FinishEvent(ctx, "sim", id, fence, state, "", "", old); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	db.Close()

	var out bytes.Buffer
	err = run(ctx, []string{"purge", "--db", cfg.db}, env(map[string]string{"ONCEPAY_EVENT_RETENTION": "1h"}), &out, io.Discard)
	if err != nil || !strings.Contains(out.String(), ", 1 final webhook events past the event retention") {
		t.Fatalf("purge = %v, printed %q; want 1 event deleted", err, out.String())
	}
	if db, err = cfg.openStore(ctx); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.ListEvents(ctx, payment.EventFilter{Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].ID != "evt_failed" {
		t.Errorf("inbox after purge = %+v, %v; want only the failed event", evs, err)
	}
}

// Only the endpoint of the provider payments go to settles them: Stripe's
// for --provider stripe, the simulated provider's for the in-process one
// and for a sim-provider elsewhere.
func TestWebhookEndpointOfTheProvider(t *testing.T) {
	for _, tc := range []struct{ provider, want string }{
		{"sim", "sim"}, {"http://127.0.0.1:9000", "sim"}, {"stripe", "stripe"},
	} {
		c := config{provider: tc.provider}
		if got := c.webhookEndpoint(); got != tc.want {
			t.Errorf("--provider %s: webhook endpoint %q, want %q", tc.provider, got, tc.want)
		}
	}
}

// serve takes every form of --sim-webhook-secret the Standard Webhooks
// libraries take (no "whsec_", unpadded base64, a key under 16 bytes, with
// a warning), and still refuses one that is not base64. A port already
// taken stops each run right after the configuration is accepted.
func TestSimWebhookSecretForms(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		secret      string
		ok, warning bool
	}{
		{"whsec_MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM=", true, false}, // 23 bytes, padded
		{"MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM=", true, false},
		{"whsec_MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM", true, false},
		{"whsec_c2hvcnQ=", true, true}, // "short"
		{"whsec_not base64!", false, false},
	} {
		var logs strings.Builder
		err := run(context.Background(), []string{"serve", "--addr", ln.Addr().String(), "--db", filepath.Join(t.TempDir(), "s.db"),
			"--sim-webhook-secret", tt.secret}, env(nil), io.Discard, &logs)
		if accepted := err != nil && strings.Contains(err.Error(), "address already in use"); accepted != tt.ok {
			t.Errorf("serve --sim-webhook-secret %s = %v, want accepted %v", tt.secret, err, tt.ok)
		}
		if warned := strings.Contains(logs.String(), "shorter than 16 bytes"); warned != tt.warning {
			t.Errorf("serve --sim-webhook-secret %s: warned of a short key %v, want %v:\n%s", tt.secret, warned, tt.warning, logs.String())
		}
	}
}

func TestSplitFlags(t *testing.T) {
	for in, want := range map[string][]string{
		"":                                     nil,
		"--deliver-schedule @every 1s":         {"--deliver-schedule", "@every 1s"},
		"--max-batch 1 --deliver-schedule=off": {"--max-batch", "1", "--deliver-schedule=off"},
	} {
		if got := splitFlags(in); !slices.Equal(got, want) {
			t.Errorf("splitFlags(%q) = %q, want %q", in, got, want)
		}
	}
}
