package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/oncepay/oncepay/internal/fallback"
	"github.com/oncepay/oncepay/internal/httpjson"
	"github.com/oncepay/oncepay/payment"
)

// maxBody bounds request bodies; a charge or a fault setting is tiny.
const maxBody = 64 << 10

// Handler serves the ledger and the fault knobs under /sim/, and the provider
// API under /v1/ that a remote client speaks when the sim runs as its own
// process:
//
//	GET  /sim/charges                  {"data":[charge, ...]}, oldest first
//	GET  /sim/calls                    {"data":[{"idempotency_key","charges","lookups"}, ...]}, by key
//	GET  /sim/faults                   the Faults JSON
//	PUT  /sim/faults                   the full Faults JSON; 400 problem if invalid
//	POST /v1/charges                   Idempotency-Key header, {"amount","currency","source","description"[,"payment_id"]}
//	GET  /v1/charges?idempotency_key=K the charge, or 404
//	GET  /sim/refunds                  {"data":[refund, ...]}, oldest first
//	POST /v1/refunds                   Idempotency-Key header, {"charge_id","amount","currency"}
//	GET  /v1/refunds?idempotency_key=K the refund, or 402 if it failed, or 404
//	POST /sim/refunds/{id}/fail        {"failure_code"?}: the bank returns the refund (FailRefund)
//	POST /sim/charges/{id}/dispute     {"reason"?}: the cardholder disputes the charge (Dispute)
//	POST /sim/disputes/{id}/close      {"status":"won"|"lost"} (CloseDispute)
//	GET  /v1/disputes/{id}             the dispute, or 404
//
// Provider API errors are {"error":{"type","code","message"}}: 402 a decline,
// 409 a key reused with other parameters, 400 bad input, 500 a failure before
// charging. A response lost after charging closes the connection unanswered.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/charges", s.handleLedger)
	mux.HandleFunc("GET /sim/calls", s.handleCalls)
	mux.HandleFunc("GET /sim/faults", s.handleGetFaults)
	mux.HandleFunc("PUT /sim/faults", s.handlePutFaults)
	mux.HandleFunc("POST /v1/charges", s.handleCharge)
	mux.HandleFunc("GET /v1/charges", s.handleLookup)
	mux.HandleFunc("GET /sim/refunds", s.handleRefundLedger)
	mux.HandleFunc("POST /v1/refunds", s.handleRefund)
	mux.HandleFunc("GET /v1/refunds", s.handleLookupRefund)
	mux.HandleFunc("POST /sim/refunds/{id}/fail", s.handleFailRefund)
	mux.HandleFunc("POST /sim/charges/{id}/dispute", s.handleDispute)
	mux.HandleFunc("POST /sim/disputes/{id}/close", s.handleCloseDispute)
	mux.HandleFunc("GET /v1/disputes/{id}", s.handleLookupDispute)
	return fallback.Mux(mux, http.HandlerFunc(handleNotFound), http.HandlerFunc(handleMethodNotAllowed))
}

func handleNotFound(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, http.StatusNotFound, payment.ProblemNotFound, "Not found", "No such route.")
}

func handleMethodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, http.StatusMethodNotAllowed, payment.ProblemMethodNotAllowed, "Method not allowed", "")
}

func (s *Sim) handleLedger(w http.ResponseWriter, r *http.Request) {
	writeLedger(w, r, "charges", s.Charges)
}

// writeLedger writes what read returns as {"data":[...]}, or a problem if
// the ledger could not be read.
func writeLedger[T any](w http.ResponseWriter, r *http.Request, what string, read func(context.Context) ([]T, error)) {
	rows, err := read(r.Context())
	if err != nil {
		slog.ErrorContext(r.Context(), "sim: list "+what, "err", err)
		writeProblem(w, http.StatusInternalServerError, "/problems/internal", "Internal error", "The ledger could not be read.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": rows})
}

func (s *Sim) handleCalls(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"data": s.Calls()})
}

func (s *Sim) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Sim) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	err := decode(w, r, &f)
	if err == nil {
		err = s.SetFaults(f)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "/problems/invalid-request", "Invalid fault settings", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Sim) handleCharge(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Source      string `json:"source"`
		Description string `json:"description"`
		PaymentID   string `json:"payment_id"` // optional: the caller's name of the payment, carried in events
	}
	if err := decode(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: err.Error()})
		return
	}
	c, err := s.Charge(r.Context(), payment.ChargeRequest{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Amount:         body.Amount,
		Currency:       body.Currency,
		Source:         body.Source,
		Description:    body.Description,
		PaymentID:      body.PaymentID,
	})
	s.answer(w, r, "charge", c, err)
}

func (s *Sim) handleLookup(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("idempotency_key")
	if key == "" {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "idempotency_key is required"})
		return
	}
	c, found, err := s.Lookup(r.Context(), payment.LookupRequest{IdempotencyKey: key})
	switch {
	case errors.Is(err, ErrLookupFailed):
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: err.Error()})
	case err != nil && r.Context().Err() != nil:
		// The caller hung up (its timeout, say): there is no one to answer.
	case err != nil:
		slog.ErrorContext(r.Context(), "sim: lookup", "err", err)
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: "internal error"})
	case !found:
		writeError(w, http.StatusNotFound, apiError{Type: "not_found", Message: "no charge under this idempotency key"})
	default:
		writeJSON(w, http.StatusOK, c)
	}
}

func (s *Sim) handleRefundLedger(w http.ResponseWriter, r *http.Request) {
	writeLedger(w, r, "refunds", s.Refunds)
}

func (s *Sim) handleRefund(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ChargeID string `json:"charge_id"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
		Reason   string `json:"reason"`
		// Optional: the caller's names of the refund and its payment,
		// carried in events.
		RefundID  string `json:"refund_id"`
		PaymentID string `json:"payment_id"`
	}
	if err := decode(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: err.Error()})
		return
	}
	rf, err := s.Refund(r.Context(), payment.ProviderRefundRequest{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		ChargeID:       body.ChargeID, Amount: body.Amount, Currency: body.Currency, Reason: body.Reason,
		RefundID: body.RefundID, PaymentID: body.PaymentID,
	})
	s.answer(w, r, "refund", rf, err)
}

func (s *Sim) handleLookupRefund(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("idempotency_key")
	if key == "" {
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "idempotency_key is required"})
		return
	}
	rf, found, err := s.LookupRefund(r.Context(), payment.RefundLookup{IdempotencyKey: key})
	if err == nil && !found {
		writeError(w, http.StatusNotFound, apiError{Type: "not_found", Message: "no refund under this idempotency key"})
		return
	}
	s.answer(w, r, "refund lookup", rf, err)
}

func (s *Sim) handleFailRefund(w http.ResponseWriter, r *http.Request) {
	var body struct {
		FailureCode string `json:"failure_code"`
	}
	if !decodeKnob(w, r, &body, true) {
		return
	}
	rf, err := s.FailRefund(r.Context(), r.PathValue("id"), body.FailureCode)
	knobAnswer(w, r, "no such refund in the ledger", rf, err, ErrNoRefund)
}

func (s *Sim) handleDispute(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if !decodeKnob(w, r, &body, true) {
		return
	}
	d, err := s.Dispute(r.Context(), r.PathValue("id"), body.Reason)
	knobAnswer(w, r, "no such charge in the ledger", d, err, ErrNoCharge)
}

func (s *Sim) handleCloseDispute(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Status string `json:"status"`
	}
	if !decodeKnob(w, r, &body, false) {
		return
	}
	d, err := s.CloseDispute(r.Context(), r.PathValue("id"), body.Status)
	knobAnswer(w, r, "no such dispute in the ledger", d, err, payment.ErrNoDispute)
}

// decodeKnob reads the body of a /sim/ action (optional: may be left out)
// or answers a 400 problem.
func decodeKnob(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	err := decode(w, r, v)
	if err == nil || optional && errors.Is(err, io.EOF) {
		return true
	}
	writeProblem(w, http.StatusBadRequest, "/problems/invalid-request", "Invalid request", err.Error())
	return false
}

// knobAnswer writes the result of a /sim/ action as the knobs answer:
// v, or a problem: 404 for notFound, 400 for bad input, 500 otherwise.
func knobAnswer(w http.ResponseWriter, r *http.Request, missing string, v any, err, notFound error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.Is(err, notFound):
		writeProblem(w, http.StatusNotFound, payment.ProblemNotFound, "Not found", missing+".")
	case errors.Is(err, ErrInvalidRequest):
		writeProblem(w, http.StatusBadRequest, "/problems/invalid-request", "Invalid request", err.Error())
	default:
		slog.ErrorContext(r.Context(), "sim: "+r.URL.Path, "err", err)
		writeProblem(w, http.StatusInternalServerError, "/problems/internal", "Internal error", "The ledger could not be written.")
	}
}

func (s *Sim) handleLookupDispute(w http.ResponseWriter, r *http.Request) {
	d, err := s.LookupDispute(r.Context(), r.PathValue("id"))
	if errors.Is(err, payment.ErrNoDispute) {
		writeError(w, http.StatusNotFound, apiError{Type: "not_found", Message: "no such dispute"})
		return
	}
	s.answer(w, r, "dispute lookup", d, err)
}

// answer writes the result of a call that moves money or looks it up: v,
// or the provider API's error for err.
func (s *Sim) answer(w http.ResponseWriter, r *http.Request, op string, v any, err error) {
	var d *payment.DeclineError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.As(err, &d):
		writeError(w, http.StatusPaymentRequired, apiError{Type: "card_error", Code: d.Code, Message: d.Message})
	case errors.Is(err, ErrLostResponse):
		loseResponse(w)
	case errors.Is(err, ErrKeyMismatch):
		writeError(w, http.StatusConflict, apiError{Type: "idempotency_error", Message: err.Error()})
	case errors.Is(err, ErrInvalidRequest):
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: err.Error()})
	case errors.Is(err, ErrFailedBeforeCharge), errors.Is(err, ErrLookupFailed):
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: err.Error()})
	case r.Context().Err() != nil:
		// The caller hung up (its timeout, say): there is no one to answer.
	default:
		slog.ErrorContext(r.Context(), "sim: "+op, "err", err)
		writeError(w, http.StatusInternalServerError, apiError{Type: "api_error", Message: "internal error"})
	}
}

// loseResponse closes the connection without a byte of response: what a
// caller sees when the network drops the reply to a committed charge.
func loseResponse(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 cannot hand its connection over; aborting resets the stream,
		// which loses the response just the same.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// apiError is the provider API's error body, in the style of Stripe's.
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, map[string]apiError{"error": e})
}

// problem is an RFC 9457 problem detail, as oncepay's own API writes them.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	httpjson.Problem(w, status, problem{Type: typ, Title: title, Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.JSON(w, status, v) }

// decode reads one JSON value from a bounded body, rejecting unknown fields
// the way a provider rejects unknown parameters.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
