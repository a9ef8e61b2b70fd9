package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/oncepay/oncepay/payment"
)

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
	// retryAfter is what a client waits before retrying a 409 in progress or
	// a 503: short, since the owner's call or the database usually finishes
	// well within it.
	retryAfter = 1
)

// problemOf maps a domain error to what the client sees. Internal errors are
// logged in full and shown as a bare 500: never their text.
func (s *server) problemOf(r *http.Request, err error) (payment.Problem, bool) {
	code := payment.ErrorCode(err)
	p := payment.Problem{Detail: payment.ErrorMessage(err)}
	retry := false
	switch code {
	case payment.EINVALID:
		p.Type, p.Title, p.Status = payment.ProblemInvalidRequest, "Invalid request", http.StatusBadRequest
	case payment.EKEY:
		p.Type, p.Title, p.Status = payment.ProblemInvalidKey, "Invalid Idempotency-Key", http.StatusBadRequest
	case payment.EUNAUTHORIZED:
		p.Type, p.Title, p.Status = payment.ProblemUnauthorized, "Unauthorized", http.StatusUnauthorized
	case payment.ENOTFOUND:
		p.Type, p.Title, p.Status = payment.ProblemNotFound, "Not found", http.StatusNotFound
	case payment.EKEYREUSED:
		p.Type, p.Title, p.Status = payment.ProblemKeyReused, "Idempotency-Key reused", http.StatusConflict
	case payment.EINPROGRESS:
		p.Type, p.Title, p.Status = payment.ProblemInProgress, "Request in progress", http.StatusConflict
		retry = true
	case payment.EOUTCOMEUNKNOWN:
		p.Type, p.Title, p.Status = payment.ProblemOutcomeUnknown, "Payment outcome unknown", http.StatusServiceUnavailable
		retry = true
	case payment.EUNAVAILABLE:
		s.Log.Warn("unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		p.Type, p.Title, p.Status = payment.ProblemUnavailable, "Service unavailable", http.StatusServiceUnavailable
		retry = true
	default:
		s.Log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		p.Type, p.Title, p.Status = payment.ProblemInternal, "Internal error", http.StatusInternalServerError
	}
	return p, retry
}

// writeError writes err as a problem.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	infoOf(r).outcome = outcomeOfError(err)
	p, retry := s.problemOf(r, err)
	if retry {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
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
	writeProblem(w, payment.Problem{Type: payment.ProblemMethodNotAllowed, Title: "Method not allowed", Status: http.StatusMethodNotAllowed})
}
