package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/internal/fallback"
	"github.com/oncepay/oncepay/payment"
)

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
)

// problemOf maps err to what the client sees, logging what the operator
// must see: internal errors in full (the client gets a bare 500, never
// their text) and an unavailable database.
func (s *server) problemOf(r *http.Request, err error) payment.Problem {
	switch payment.ErrorCode(err) {
	case payment.EUNAVAILABLE:
		s.Log.Warn("unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
	case payment.EINTERNAL:
		s.Log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return payment.ProblemOf(err)
}

// writeError writes err as a problem.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	infoOf(r).outcome = outcomeOfError(err)
	p := s.problemOf(r, err)
	if p.Retryable() {
		w.Header().Set("Retry-After", strconv.Itoa(payment.RetryAfterSeconds))
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay"`)
	}
	writeProblem(w, p)
}

// writeProblem writes an RFC 9457 problem.
func writeProblem(w http.ResponseWriter, p payment.Problem) {
	writeBody(w, p.Status, p.Body())
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, payment.Problem{Type: payment.ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError})
		return
	}
	writeBody(w, status, append(b, '\n'))
}

// writeBody writes body with status and the content type the status implies:
// JSON for success, problem+json for errors.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	ct := contentTypeJSON
	if status >= 400 {
		ct = contentTypeProblem
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

func (s *server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	writeProblem(w, payment.Problem{Type: payment.ProblemNotFound, Title: "Not found", Status: http.StatusNotFound, Detail: "No such route."})
}

func (s *server) handleMethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	allow := fallback.Allowed(func(r *http.Request) bool {
		var m mux.RouteMatch
		return s.router.Match(r, &m) && m.MatchErr == nil
	}, r)
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
	}
	writeProblem(w, payment.Problem{Type: payment.ProblemMethodNotAllowed, Title: "Method not allowed", Status: http.StatusMethodNotAllowed})
}
