package server_test

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Guessing the admin token is slowed down: after 10 wrong tries in a row a
// client gets 429 with Retry-After, even with the right token (or guesses
// would still be told apart), until the wait is over; then one more try.
func TestAdminFailuresSlowedDown(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const token = "limit-admin-token-0123456789abcdef"
	e := newEnv(t, envOptions{auth: true, adminToken: token, now: clock})
	right := []string{"Authorization", "Bearer " + token}
	wrong := []string{"Authorization", "Bearer guess"}

	for i := range 10 {
		if r := e.do("GET", "/v1/attempts", nil, wrong...); r.Status != 401 {
			t.Fatalf("wrong try %d = %d, want 401", i+1, r.Status)
		}
	}
	for _, h := range [][]string{wrong, right, {"Authorization", basic("admin", token)}} {
		r := e.do("GET", "/admin", nil, h...)
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if r.Status != 429 || r.problemType() != payment.ProblemTooManyRequests || err != nil || secs < 1 || secs > 6 {
			t.Errorf("try after 10 failures = %d %q Retry-After %q, want 429 %s with 1-6 seconds",
				r.Status, r.problemType(), r.Header.Get("Retry-After"), payment.ProblemTooManyRequests)
		}
		var p payment.Problem
		if json.Unmarshal(r.Body, &p); p.Status != 429 {
			t.Errorf("429 body = %s, want a problem", r.Body)
		}
	}
	for _, path := range []string{"/metrics", "/sim/charges"} {
		if r := e.do("GET", path, nil, right...); r.Status != 429 {
			t.Errorf("GET %s while limited = %d, want 429", path, r.Status)
		}
	}
	// The merchant API is not the admin surface: it is not limited.
	if r := e.do("GET", "/v1/payments/pay_x", nil, "Authorization", "Bearer nope"); r.Status != 401 {
		t.Errorf("merchant API while admin is limited = %d, want 401", r.Status)
	}

	advance(6 * time.Second) // one more try earned back
	if r := e.do("GET", "/v1/attempts", nil, right...); r.Status != 200 {
		t.Errorf("right token after the wait = %d %s, want 200", r.Status, r.Body)
	}
	if r := e.do("GET", "/v1/attempts", nil, wrong...); r.Status != 401 {
		t.Errorf("wrong token after the wait = %d, want 401", r.Status)
	}
	if r := e.do("GET", "/v1/attempts", nil, right...); r.Status != 429 {
		t.Errorf("right token after that failure = %d, want 429 (the earned try was spent)", r.Status)
	}
	advance(time.Minute)
	if r := e.do("GET", "/v1/attempts", nil, right...); r.Status != 200 {
		t.Errorf("right token a minute later = %d, want 200", r.Status)
	}
}

// A request with no credential at all is no guess: any number of them
// leaves the admin's own tries (behind a proxy, everyone's) untouched.
func TestAdminRequestsWithoutCredentialNotCounted(t *testing.T) {
	const token = "limit-admin-token-0123456789abcdef"
	e := newEnv(t, envOptions{auth: true, adminToken: token})
	for i := range 2 * 10 {
		if r := e.do("GET", "/admin", nil); r.Status != 401 {
			t.Fatalf("request %d with no credential = %d, want 401", i+1, r.Status)
		}
	}
	if r := e.do("GET", "/v1/attempts", nil, "Authorization", "Bearer "+token); r.Status != 200 {
		t.Errorf("right token after 20 requests with no credential = %d, want 200", r.Status)
	}
	for range 10 {
		e.do("GET", "/admin", nil, "Authorization", basic("admin", ""))
	}
	if r := e.do("GET", "/v1/attempts", nil, "Authorization", "Bearer "+token); r.Status != 429 {
		t.Errorf("right token after 10 empty Basic passwords = %d, want 429 (an empty password is a guess)", r.Status)
	}
}
