package server_test

import (
	"context"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// The list pages by 50, newest first; the pager's links keep the filter and
// say which rows are shown.
func TestAdminListPages(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 51 {
		if r := e.pay(fmt.Sprintf("page-%02d", i), visa); r.Status != 201 {
			t.Fatalf("pay = %d %s", r.Status, r.Body)
		}
	}
	link := regexp.MustCompile(`href="(/admin\?[^"]*)">(← Newer|Older →)`)
	links := func(page string) map[string]string {
		m := map[string]string{}
		for _, l := range link.FindAllStringSubmatch(page, -1) {
			m[l[2]] = l[1]
		}
		return m
	}
	first := html.UnescapeString(string(e.do("GET", "/admin?status=succeeded", nil).Body))
	l := links(first)
	if !strings.Contains(first, "50 shown") || !strings.HasPrefix(l["Older →"], "/admin?before=") || !strings.Contains(l["Older →"], "status=succeeded") || l["← Newer"] != "" {
		t.Errorf("first page: want 50 shown and only an Older link keeping the filter; links %v", l)
	}
	second := html.UnescapeString(string(e.do("GET", l["Older →"], nil).Body))
	l = links(second)
	if !strings.Contains(second, "1 shown") || !strings.HasPrefix(l["← Newer"], "/admin?after=") || !strings.Contains(l["← Newer"], "status=succeeded") || l["Older →"] != "" {
		t.Errorf("second page: want 1 shown and only a Newer link; links %v", l)
	}
	if !strings.Contains(second, "page-00") || strings.Contains(second, "page-50") {
		t.Errorf("second page does not hold the oldest attempt alone")
	}
	back := html.UnescapeString(string(e.do("GET", l["← Newer"], nil).Body))
	l = links(back)
	if !strings.Contains(back, "50 shown") || !strings.Contains(back, "page-50") || strings.Contains(back, "page-00") || l["Older →"] == "" || l["← Newer"] != "" {
		t.Errorf("the page newer than the second: want the first page again; links %v", l)
	}
}

// An attempt counts as stale once it has been untouched for stale-after with
// no live lease, not a moment before; the page says how many there are.
func TestAdminStaleCount(t *testing.T) {
	now := time.Now()
	e := newEnv(t, envOptions{now: func() time.Time { return now }})
	for key, updated := range map[string]time.Duration{"fresh": time.Minute, "stale": 6 * time.Minute} {
		req, _ := payment.ParseRequest([]byte(visa))
		a := payment.NewAttempt("demo", key, req, now.Add(-updated), 0)
		if ok, err := e.DB.Claim(context.Background(), &a); !ok || err != nil {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
	}
	page := string(e.do("GET", "/admin", nil).Body)
	if !strings.Contains(page, "<b>1 stale</b>") || !strings.Contains(page, "Reconcile 1 stale now") {
		t.Errorf("admin page does not count exactly one stale attempt")
	}
}

// Closed, the admin surface says how to open it; with a token set, it asks
// for the token.
func TestAdminUnauthorizedSaysWhy(t *testing.T) {
	closed := newEnv(t, envOptions{auth: true})
	if r := closed.do("GET", "/admin", nil); !strings.Contains(string(r.Body), "--admin-token") {
		t.Errorf("closed admin = %d %s, want a detail naming --admin-token", r.Status, r.Body)
	}
	open := newEnv(t, envOptions{auth: true, adminToken: strings.Repeat("t", 32)})
	if r := open.do("GET", "/admin", nil); r.Status != 401 || strings.Contains(string(r.Body), "closed") || !strings.Contains(string(r.Body), "Send the admin token") {
		t.Errorf("admin without the token = %d %s, want 401 asking for it", r.Status, r.Body)
	}
}

// The payment's panel shows refunds in progress only while one holds an
// amount: a refund whose answer was lost keeps its reservation until it is
// settled.
func TestAdminShowsRefundsInProgress(t *testing.T) {
	e := newEnv(t, envOptions{})
	id := e.paid("order-1")
	if page := string(e.do("GET", "/admin/attempts/"+id, nil).Body); strings.Contains(page, "Refunds in progress") {
		t.Errorf("payment page shows refunds in progress with none")
	}
	e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1}) // the refund's answer is lost too
	if r := e.refund(id, "refund-1", `{"amount":300}`); r.Status != 503 {
		t.Fatalf("refund with its answer lost = %d %s, want 503", r.Status, r.Body)
	}
	if page := string(e.do("GET", "/admin/attempts/"+id, nil).Body); !strings.Contains(page, "<dt>Refunds in progress</dt><dd>3.00 EUR</dd>") {
		t.Errorf("payment page does not show the 3.00 EUR held by the refund in progress")
	}
}
