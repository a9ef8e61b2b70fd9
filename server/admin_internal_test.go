package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Amounts show in major units with the currency's own number of digits.
func TestFormatAmount(t *testing.T) {
	for _, tt := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{1999, "EUR", "19.99 EUR"},
		{5, "EUR", "0.05 EUR"},
		{100, "USD", "1.00 USD"},
		{1999, "JPY", "1999 JPY"},
		{1999, "KWD", "1.999 KWD"},
		{99_999_999, "GBP", "999999.99 GBP"},
	} {
		if got := formatAmount(tt.amount, tt.currency); got != tt.want {
			t.Errorf("formatAmount(%d, %s) = %q, want %q", tt.amount, tt.currency, got, tt.want)
		}
	}
}

// The list's links keep the filter and the search, and leave out what is
// not set.
func TestListURL(t *testing.T) {
	for _, tt := range []struct {
		status, search, before, after string
		want                          string
	}{
		{"", "", "", "", "/admin"},
		{"failed", "", "", "", "/admin?status=failed"},
		{"", "order 1", "", "", "/admin?q=order+1"},
		{"", "", "17.pay_1", "", "/admin?before=17.pay_1"},
		{"succeeded", "k", "", "17.pay_1", "/admin?after=17.pay_1&q=k&status=succeeded"},
	} {
		if got := listURL(tt.status, tt.search, tt.before, tt.after); got != tt.want {
			t.Errorf("listURL(%q, %q, %q, %q) = %q, want %q", tt.status, tt.search, tt.before, tt.after, got, tt.want)
		}
	}
}

// limit and the cursors at the edges of what the list takes; an offset,
// never.
func TestListParamsBounds(t *testing.T) {
	for _, tt := range []struct {
		query         string
		limit         int
		before, after string
		ok            bool
	}{
		{"", 50, "", "", true},
		{"limit=1", 1, "", "", true},
		{"limit=500", 500, "", "", true},
		{"limit=0", 0, "", "", false},
		{"limit=501", 0, "", "", false},
		{"offset=0", 0, "", "", false},
		{"offset=7", 0, "", "", false},
		{"before=17.pay_1", 50, "17.pay_1", "", true},
		{"after=0.re_x", 50, "", "0.re_x", true},
		{"before=17.pay_1&after=17.pay_1", 0, "", "", false},
		{"before=pay_1", 0, "", "", false},
		{"before=-1.pay_1", 0, "", "", false},
		{"after=17.", 0, "", "", false},
		{"status=in_progress&q=x", 50, "", "", true},
	} {
		f, err := listParams(httptest.NewRequest("GET", "/admin?"+tt.query, nil), 50)
		if (err == nil) != tt.ok {
			t.Errorf("%q: err = %v, want ok %v", tt.query, err, tt.ok)
			continue
		}
		cursor := func(c *payment.AttemptCursor) string {
			if c == nil {
				return ""
			}
			return c.String()
		}
		if tt.ok && (f.Limit != tt.limit || cursor(f.Before) != tt.before || cursor(f.After) != tt.after) {
			t.Errorf("%q: limit %d before %q after %q, want %d %q %q", tt.query, f.Limit, cursor(f.Before), cursor(f.After), tt.limit, tt.before, tt.after)
		}
	}
}

// Stored JSON is pretty-printed; what is not JSON is shown as it is.
func TestIndent(t *testing.T) {
	if got, want := indent([]byte(`{"a":1}`)), "{\n  \"a\": 1\n}"; got != want {
		t.Errorf("indent(JSON) = %q, want %q", got, want)
	}
	if got := indent([]byte("not json")); got != "not json" {
		t.Errorf("indent(text) = %q, want it unchanged", got)
	}
}

// Ages read at a glance, at every unit's edge.
func TestAge(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{999 * time.Millisecond, "<1s"},
		{time.Second, "1s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m0s"},
		{47*time.Hour + 59*time.Minute, "47h59m0s"},
		{48 * time.Hour, "2d"},
		{10 * 24 * time.Hour, "10d"},
	} {
		if got := age(tt.d); got != tt.want {
			t.Errorf("age(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// Only numbers from a link reach the flash message.
func TestNum(t *testing.T) {
	for in, want := range map[string]string{"3": "3", "0": "0", "-2": "-2", "<b>": "?", "": "?"} {
		if got := num(in); got != want {
			t.Errorf("num(%q) = %q, want %q", in, got, want)
		}
	}
}

// What the detail page says of the lease, in each state.
func TestLeaseText(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		a    payment.Attempt
		want string
	}{
		{payment.Attempt{Status: payment.Succeeded, LeaseExpiresAt: now.Add(time.Hour)}, "none (final)"},
		{payment.Attempt{Status: payment.InProgress}, "released"},
		{payment.Attempt{Status: payment.InProgress, LeaseExpiresAt: now.Add(30 * time.Second)}, "held by a live request until 12:00:30.000 UTC (30s left)"},
		{payment.Attempt{Status: payment.InProgress, LeaseExpiresAt: now}, "expired at 12:00:00.000 UTC"},
	} {
		if got := leaseText(&tt.a, now); !strings.HasPrefix(got, tt.want) {
			t.Errorf("leaseText(%s, lease %v) = %q, want it to start %q", tt.a.Status, tt.a.LeaseExpiresAt, got, tt.want)
		}
	}
}

// The status a request is logged with is the first one written, or 200
// for a body written without one.
func TestStatusWriter(t *testing.T) {
	w := &statusWriter{ResponseWriter: httptest.NewRecorder()}
	w.WriteHeader(404)
	w.WriteHeader(500) // net/http ignores a second WriteHeader; so does the log
	if w.status != 404 {
		t.Errorf("status after 404 then 500 = %d, want 404", w.status)
	}
	w = &statusWriter{ResponseWriter: httptest.NewRecorder()}
	w.Write([]byte("ok"))
	w.WriteHeader(500)
	if w.status != 200 {
		t.Errorf("status after a bare Write = %d, want 200", w.status)
	}
}

// One log line a request, its duration in milliseconds.
func TestRequestLogLine(t *testing.T) {
	var logs strings.Builder
	s := &server{Config: Config{Log: slog.New(slog.NewJSONHandler(&logs, nil))}}
	h := s.observe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz?secret=1", nil))
	var line struct {
		Status     int     `json:"status"`
		Path       string  `json:"path"`
		Outcome    string  `json:"outcome"`
		DurationMS float64 `json:"duration_ms"`
	}
	if err := json.Unmarshal([]byte(logs.String()), &line); err != nil {
		t.Fatalf("log = %q: %v", logs.String(), err)
	}
	if line.Status != 200 || line.Path != "/healthz" || line.Outcome != "ok" {
		t.Errorf("log line = %+v, want status 200, path /healthz (no query), outcome ok", line)
	}
	if line.DurationMS < 20 || line.DurationMS > 60_000 {
		t.Errorf("duration_ms = %v for a 20 ms request, want milliseconds", line.DurationMS)
	}
}

// The admin failure limit: a burst of failures in a row, then one more per
// period, earned back over time; each address its own; the memory bounded.
func TestFailureLimiter(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newFailureLimiter(10, 6*time.Second)
	for i := range 10 {
		if w := l.wait("10.0.0.1", t0); w != 0 {
			t.Fatalf("wait before failure %d = %v, want 0", i+1, w)
		}
		l.fail("10.0.0.1", t0)
	}
	for _, tt := range []struct {
		after time.Duration
		want  time.Duration
	}{{0, 6 * time.Second}, {3 * time.Second, 3 * time.Second}, {6 * time.Second, 0}} {
		if got := l.wait("10.0.0.1", t0.Add(tt.after)); got != tt.want {
			t.Errorf("wait %v after the burst = %v, want %v", tt.after, got, tt.want)
		}
	}
	if w := l.wait("10.0.0.2", t0); w != 0 {
		t.Errorf("another address waits %v, want 0", w)
	}

	// Below the bound a client stays known, refilled or not.
	l = newFailureLimiter(1, time.Second)
	l.fail("a", t0)
	l.fail("b", t0.Add(time.Hour)) // a has long refilled
	if len(l.clients) != 2 {
		t.Errorf("clients below the bound = %d, want 2", len(l.clients))
	}
}

// A spray of addresses does not give a locked-out client its tries back:
// issue 28's probe locked one address out, then failed once from each of
// 10,001 others in 4.7 s, and the limiter forgot everyone.
func TestFailureLimiterSprayKeepsLockOut(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newFailureLimiter(adminFailureBurst, adminFailureEvery)
	for range adminFailureBurst {
		l.fail("192.0.2.1", t0)
	}
	var now time.Time
	for i := range maxLimitedClients + 1 {
		now = t0.Add(time.Duration(i) * 470 * time.Microsecond)
		l.fail("10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), now)
	}
	if got, want := l.wait("192.0.2.1", now), adminFailureEvery-now.Sub(t0); got != want {
		t.Errorf("locked-out client's wait after the spray = %v, want %v", got, want)
	}
	if got := len(l.clients); got != maxLimitedClients {
		t.Errorf("clients after the spray = %d, want the bound, %d", got, maxLimitedClients)
	}
}

// At the bound the limiter forgets the unlocked client nearest to having
// all its tries back; when every client is locked out, a new one is not
// tracked, and waits as long as the first of them.
func TestFailureLimiterAtTheBound(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newFailureLimiter(3, time.Second)
	l.max = 3
	for i, c := range []string{"a", "b", "c"} {
		for range i + 1 {
			l.fail(c, t0) // a and b may still try, c is locked out
		}
	}
	l.fail("d", t0)
	if _, ok := l.clients["a"]; ok || len(l.clients) != 3 {
		t.Errorf("clients after d = %v, want a forgotten (the nearest to a full bucket)", l.clients)
	}

	l = newFailureLimiter(1, time.Second)
	l.max = 3
	for _, c := range []string{"a", "b", "c"} {
		l.fail(c, t0.Add(-500*time.Millisecond))
	}
	now := t0.Add(-400 * time.Millisecond)
	if got, want := l.wait("d", now), 900*time.Millisecond; got != want {
		t.Errorf("new client's wait with every client locked out = %v, want %v", got, want)
	}
	l.fail("d", now)
	if _, ok := l.clients["d"]; ok || len(l.clients) != 3 {
		t.Errorf("clients after d with every client locked out = %v, want a, b and c", l.clients)
	}
	for _, c := range []string{"a", "b", "c"} {
		if w := l.wait(c, now); w == 0 {
			t.Errorf("%s may try after d's failure, want it still locked out", c)
		}
	}
	now = t0.Add(500 * time.Millisecond) // a, b and c have their try back
	if w := l.wait("d", now); w != 0 {
		t.Errorf("new client's wait once the others are unlocked = %v, want 0", w)
	}
	l.fail("d", now)
	if _, ok := l.clients["d"]; !ok || len(l.clients) != 1 {
		t.Errorf("clients after d once the others are refilled = %v, want d alone", l.clients)
	}
}

// The limit goes by the connection's address, never its port (a new
// connection would be a new client) nor a header the client sets; an IPv6
// client by its /64, whose every address one host may take.
func TestClientAddr(t *testing.T) {
	r := httptest.NewRequest("GET", "/admin", nil)
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	for _, tt := range []struct{ remote, want string }{
		{"192.0.2.7:51234", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:51234", "192.0.2.7"},
		{"[2001:db8:1:2::7]:51234", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::7]:51234", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:51234", "fe80::/64"},
		{"[::1]:51234", "::/64"},
		{"not an address", "not an address"},
	} {
		r.RemoteAddr = tt.remote
		if got := clientAddr(r); got != tt.want {
			t.Errorf("clientAddr of %s = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

// At the bound, only the clients whose failures have all come back are
// forgotten; the others keep their count.
func TestFailureLimiterForgetsOnlyRefilled(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newFailureLimiter(1, time.Second)
	for i := range maxLimitedClients {
		at := t0 // failed just now: nothing back yet
		if i%2 == 0 {
			at = t0.Add(-time.Second) // exactly one period ago: the failure is back
		}
		l.fail(strconv.Itoa(i), at)
	}
	l.fail("new", t0)
	if got, want := len(l.clients), maxLimitedClients/2+1; got != want {
		t.Errorf("clients after a new one at the bound = %d, want %d (the ones still owing, and the new one)", got, want)
	}
}
