package server

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/internal/httpjson"
	"github.com/oncepay/oncepay/payment"
)

type ctxKey int

// authenticate puts the merchant's scope in the request context, or answers
// 401 before anything is read or written. In demo mode every request is in
// DemoScope.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scope := DemoScope
		if s.Keys != nil {
			secret, ok := apiKey(r)
			if !ok {
				s.writeError(w, r, payment.Errorf(payment.EUNAUTHORIZED, "Send your API key as \"Authorization: Bearer <key>\" (or as the user name of HTTP Basic, with no password)."))
				return
			}
			var err error
			if scope, err = s.Keys.Authenticate(r.Context(), secret); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		// The scope rides in the request's info, which observe already put in
		// the context: no second copy of the request.
		info, ok := r.Context().Value(infoKey).(*requestInfo)
		if !ok {
			info = &requestInfo{}
			r = r.WithContext(context.WithValue(r.Context(), infoKey, info))
		}
		info.scope = scope
		next.ServeHTTP(w, r)
	})
}

// apiKey is the API key a request carries: as a Bearer token, or as the
// user name of HTTP Basic with an empty password, the way Stripe's clients
// send theirs.
func apiKey(r *http.Request) (string, bool) {
	if user, password, ok := r.BasicAuth(); ok {
		return user, user != "" && password == ""
	}
	return bearer(r)
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// scopeOf is the scope authenticate found for r.
func scopeOf(r *http.Request) string { return infoOf(r).scope }

// handleCreatePayment is POST /v1/payments. Everything is validated before
// the claim: a bad request writes nothing and leaves the key usable.
func (s *server) handleCreatePayment(w http.ResponseWriter, r *http.Request) {
	key, body, ok := s.readKeyed(w, r, false)
	if !ok {
		return
	}
	req, err := payment.ParseRequest(body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.Payments.Pay(r.Context(), scopeOf(r), key, req)
	s.writeResult(w, r, res, err)
}

// handleCreateRefund is POST /v1/payments/{id}/refunds, with the same
// discipline as a payment: validated first, then claimed under its key.
func (s *server) handleCreateRefund(w http.ResponseWriter, r *http.Request) {
	key, body, ok := s.readKeyed(w, r, true)
	if !ok {
		return
	}
	req, err := payment.ParseRefundRequest(mux.Vars(r)["id"], body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.Payments.Refund(r.Context(), scopeOf(r), key, req)
	s.writeResult(w, r, res, err)
}

// readKeyed reads the Idempotency-Key and the JSON body of a request that
// moves money, or answers the problem with either and returns false. With
// emptyOK an empty body needs no Content-Type: there is no JSON to label.
func (s *server) readKeyed(w http.ResponseWriter, r *http.Request, emptyOK bool) (key string, body []byte, ok bool) {
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) == 1 {
		infoOf(r).keyHash = keyHash(keys[0])
	}
	if len(keys) != 1 || !payment.ValidKey(keys[0]) {
		s.writeError(w, r, payment.Errorf(payment.EKEY, "Send exactly one Idempotency-Key header of 1-%d visible ASCII characters, made once per payment intent.", payment.MaxKeyLen))
		return "", nil, false
	}
	if !identityEncoded(r.Header.Values("Content-Encoding")) {
		// RFC 9110 15.5.16: say which codings would have been accepted.
		w.Header().Set("Accept-Encoding", "identity")
		writeProblem(w, payment.Problem{Type: payment.ProblemUnsupportedEncoding, Title: "Unsupported content encoding",
			Status: http.StatusUnsupportedMediaType, Detail: "Send the body uncompressed: no Content-Encoding, or identity."})
		return "", nil, false
	}
	unlabelled := emptyOK && r.Header.Get("Content-Type") == ""
	if !unlabelled && !isJSON(r.Header.Get("Content-Type")) {
		writeUnsupportedMedia(w)
		return "", nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, payment.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeProblem(w, payment.Problem{Type: payment.ProblemTooLarge, Title: "Request too large",
			Status: http.StatusRequestEntityTooLarge, Detail: "The body is limited to 64 KiB."})
		return "", nil, false
	}
	if err != nil {
		s.writeError(w, r, payment.Errorf(payment.EINVALID, "The body could not be read."))
		return "", nil, false
	}
	if unlabelled && len(body) > 0 {
		writeUnsupportedMedia(w)
		return "", nil, false
	}
	return keys[0], body, true
}

func writeUnsupportedMedia(w http.ResponseWriter) {
	writeProblem(w, payment.Problem{Type: payment.ProblemUnsupportedMedia, Title: "Unsupported media type",
		Status: http.StatusUnsupportedMediaType, Detail: "Send the body as Content-Type: application/json."})
}

// writeResult answers a request that moved money, or tried to.
func (s *server) writeResult(w http.ResponseWriter, r *http.Request, res payment.Result, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	info := infoOf(r)
	switch {
	case res.Replayed:
		w.Header().Set("Idempotent-Replayed", "true")
		info.outcome = "replayed"
	case res.Status == http.StatusCreated:
		info.outcome = "created"
	case res.Status == http.StatusAccepted: // taken offline: queued, not declined
		info.outcome = "queued"
	default:
		info.outcome = "declined"
	}
	writeBody(w, res.Status, res.Body)
}

// identityEncoded reports whether a body with these Content-Encoding
// header values is as sent: no coding, or only identity. A compressed body
// would otherwise reach the JSON decoder as bytes that are not UTF-8.
func identityEncoded(values []string) bool {
	for _, v := range values {
		for _, coding := range strings.Split(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return false
			}
		}
	}
	return true
}

// isJSON accepts application/json, with no charset or UTF-8.
func isJSON(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != httpjson.ContentTypeJSON {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// handleGetPayment is GET /v1/payments/{id}, within the caller's scope only.
func (s *server) handleGetPayment(w http.ResponseWriter, r *http.Request) {
	v, err := s.Payments.Payment(r.Context(), scopeOf(r), mux.Vars(r)["id"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// handleListPayments is GET /v1/payments: the caller's payments, newest
// first, in Stripe's list shape, a page at a time by id.
func (s *server) handleListPayments(w http.ResponseWriter, r *http.Request) {
	f, err := paymentFilter(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := s.Payments.ListPayments(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// paymentFilter reads GET /v1/payments' query.
func paymentFilter(r *http.Request) (payment.PaymentFilter, error) {
	q := r.URL.Query()
	f := payment.PaymentFilter{Scope: scopeOf(r)}
	var err error
	if f.Status, f.Limit, err = statusAndLimit(q, payment.DefaultListLimit, payment.MaxListLimit); err != nil {
		return f, err
	}
	f.StartingAfter, f.EndingBefore, err = pageEdge(q, "a payment id")
	return f, err
}

// pageEdge reads the id a list's page starts after or ends before, of
// which a request gives one at most: what, such as "a payment id".
func pageEdge(q url.Values, what string) (startingAfter, endingBefore string, err error) {
	startingAfter, endingBefore = q.Get("starting_after"), q.Get("ending_before")
	if startingAfter != "" && endingBefore != "" {
		return "", "", payment.Invalidf("starting_after", "Give starting_after or ending_before, not both.")
	}
	for param, id := range map[string]string{"starting_after": startingAfter, "ending_before": endingBefore} {
		if len(id) > 64 || !payment.ValidKey(id) && id != "" {
			return "", "", payment.Invalidf(param, "%s must be %s.", param, what)
		}
	}
	return startingAfter, endingBefore, nil
}

// handleListEvents is GET /v1/events: the caller's events, newest first,
// in Stripe's list shape, a page at a time by id, of one type or all.
func (s *server) handleListEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := payment.OutboxFilter{Scope: scopeOf(r), Type: payment.EventType(q.Get("type"))}
	var err error
	if f.Limit, err = listLimit(q, payment.DefaultListLimit, payment.MaxListLimit); err == nil {
		f.StartingAfter, f.EndingBefore, err = pageEdge(q, "an event id")
	}
	if err == nil && f.Type != "" && !payment.ValidEventType(f.Type) {
		err = payment.Invalidf("type", "type must be one of %s.", payment.EventTypeNames())
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := s.Payments.ListEvents(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// handleListRefunds is GET /v1/payments/{id}/refunds, oldest first.
func (s *server) handleListRefunds(w http.ResponseWriter, r *http.Request) {
	rs, err := s.Payments.Refunds(r.Context(), scopeOf(r), mux.Vars(r)["id"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": rs})
}

func (s *server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	if s.Replica != nil {
		if st := s.Replica(); st.Behind() {
			writeProblem(w, payment.Problem{Type: payment.ProblemReplicaBehind, Title: "Replica behind", Status: http.StatusServiceUnavailable, Detail: st.Detail()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
