package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/internal/fallback"
	"github.com/oncepay/oncepay/internal/httpjson"
	"github.com/oncepay/oncepay/payment"
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
	infoOf(r).outcome = payment.OutcomeOf(err)
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
func writeProblem(w http.ResponseWriter, p payment.Problem) { httpjson.Problem(w, p.Status, p) }

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.JSON(w, status, v) }

// writeBody writes a stored answer with the content type its status implies.
func writeBody(w http.ResponseWriter, status int, body []byte) { httpjson.Answer(w, status, body) }

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
