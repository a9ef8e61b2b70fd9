package server_test

import (
	"testing"

	"github.com/oncepay/oncepay/payment"
)

// Every answer oncepay writes, not only its API's, is a problem: the 404s
// and 405s of the simulator, the static files and the workshop, and the
// cross-origin refusals. A 405 says in Allow what the path does take.
func TestOwnAnswersAreProblems(t *testing.T) {
	const token = "problems-admin-token-0123456789abcdef"
	serve := newEnv(t, envOptions{auth: true, adminToken: token})
	demo := newEnv(t, envOptions{workshop: true})
	admin := []string{"Authorization", "Bearer " + token}
	evil := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}
	for _, tt := range []struct {
		name         string
		e            *env
		method, path string
		headers      []string
		status       int
		problem      string
		allow        string
	}{
		{"unknown simulator path", serve, "GET", "/sim/nothing", admin, 404, payment.ProblemNotFound, ""},
		{"simulator ledger, wrong method", serve, "DELETE", "/sim/charges", admin, 405, payment.ProblemMethodNotAllowed, "GET, HEAD"},
		{"simulator faults, wrong method", serve, "POST", "/sim/faults", admin, 405, payment.ProblemMethodNotAllowed, "GET, HEAD, PUT"},
		{"simulator, cross-origin", serve, "PUT", "/sim/faults", append(evil, admin...), 403, payment.ProblemCrossOrigin, ""},
		{"missing static file", serve, "GET", "/admin/static/nothing.css", admin, 404, payment.ProblemNotFound, ""},
		{"static directory", serve, "GET", "/admin/static/", admin, 404, payment.ProblemNotFound, ""},
		{"static file, wrong method", serve, "POST", "/admin/static/admin.css", admin, 405, payment.ProblemMethodNotAllowed, "GET, HEAD"},
		{"admin form, cross-origin", serve, "POST", "/admin/reconcile", append(evil, admin...), 403, payment.ProblemCrossOrigin, ""},
		{"API, wrong method", serve, "POST", "/healthz", nil, 405, payment.ProblemMethodNotAllowed, "GET, HEAD"},
		{"API, wrong method on a payment", serve, "DELETE", "/v1/payments/pay_x", nil, 405, payment.ProblemMethodNotAllowed, "GET"},
		{"unknown workshop path", demo, "GET", "/demo/nothing", nil, 404, payment.ProblemNotFound, ""},
		{"workshop, wrong method", demo, "GET", "/demo/crash", nil, 405, payment.ProblemMethodNotAllowed, "POST"},
		{"missing workshop file", demo, "GET", "/demo/static/nothing.js", nil, 404, payment.ProblemNotFound, ""},
		{"workshop, cross-origin", demo, "POST", "/demo/reconcile", evil, 403, payment.ProblemCrossOrigin, ""},
	} {
		r := tt.e.do(tt.method, tt.path, nil, tt.headers...)
		if r.Status != tt.status || r.problemType() != tt.problem || r.Header.Get("Allow") != tt.allow {
			t.Errorf("%s: %s %s = %d %q Allow %q (%s %.80s), want %d %q Allow %q", tt.name, tt.method, tt.path,
				r.Status, r.problemType(), r.Header.Get("Allow"), r.Header.Get("Content-Type"), r.Body, tt.status, tt.problem, tt.allow)
		}
	}
	// The files themselves are still served.
	for _, c := range []struct {
		e    *env
		path string
		h    []string
	}{{serve, "/admin/static/admin.css", admin}, {demo, "/demo/static/demo.js", nil}} {
		if r := c.e.do("GET", c.path, nil, c.h...); r.Status != 200 || len(r.Body) == 0 {
			t.Errorf("GET %s = %d, want 200 and the file", c.path, r.Status)
		}
	}
}
