package payment

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// RefundReasons are the reasons a refund may give, as Stripe names them.
var RefundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

var refundFields = map[string]bool{"amount": true, "reason": true}

// RefundRequest is a validated refund request of one payment.
type RefundRequest struct {
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount,omitempty"` // 0: all that is left
	Reason    string `json:"reason,omitempty"`
}

// ParseRefundRequest decodes and validates the body of a refund of payment
// paymentID: {"amount"?: minor units, "reason"?: one of RefundReasons}. An
// empty body, or one without amount, refunds all that is left; a null
// amount is refused like any other null, never read as absent. Any problem
// is an EINVALID error.
func ParseRefundRequest(paymentID string, body []byte) (RefundRequest, error) {
	return parseRefundRequest(paymentID, body, checkJSON)
}

// parseRefundRequest is ParseRefundRequest with check as the first look at
// the body: checkJSON (the fast path, then the walk), or walkJSON alone.
func parseRefundRequest(paymentID string, body []byte, check func(body []byte, fields map[string]bool) error) (RefundRequest, error) {
	r := RefundRequest{PaymentID: paymentID}
	if len(bytes.TrimSpace(body)) == 0 {
		return r, nil
	}
	if !utf8.Valid(body) {
		return r, Errorf(EINVALID, "The body is not valid UTF-8.")
	}
	if err := check(body, refundFields); err != nil {
		return r, err
	}
	var w struct {
		Amount json.RawMessage `json:"amount"`
		Reason *string         `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		e := Errorf(EINVALID, "The body does not match the refund schema: %s.", jsonErrorDetail(err))
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			e.Param = te.Field
		}
		return r, e
	}
	if len(w.Amount) > 0 {
		amount, err := strconv.ParseInt(string(w.Amount), 10, 64)
		switch {
		case err != nil && errors.Is(err, strconv.ErrRange), err == nil && amount > MaxAmount:
			return r, Invalidf("amount", "amount is too large: at most %d minor units.", MaxAmount)
		case err != nil:
			return r, Invalidf("amount", "amount must be an integer in minor units (cents), not %s.", truncate(string(w.Amount), 40))
		case amount <= 0:
			return r, Invalidf("amount", "amount must be positive; leave it out to refund all that is left.")
		}
		r.Amount = amount
	}
	if w.Reason != nil {
		r.Reason = *w.Reason
		ok := false
		for _, v := range RefundReasons {
			ok = ok || r.Reason == v
		}
		if !ok {
			return r, Invalidf("reason", "reason must be one of %s.", strings.Join(RefundReasons, ", "))
		}
	}
	return r, nil
}

// Canonical is the request's canonical JSON, the payment's id included: the
// same key and body on another payment is another request.
func (r RefundRequest) Canonical() []byte {
	b := marshalLine(r)
	return b[:len(b)-1]
}

// refundDetails is what a refund keeps of its request: Refund.Details.
type refundDetails struct {
	Reason string `json:"reason,omitempty"`
}

// NewRefundAttempt returns the attempt a new refund request claims under
// (scope, key) at now. Its amount is req.Amount, 0 for all that is left:
// the store's claim sets it to what it reserved, and the currency.
func NewRefundAttempt(scope, key string, req RefundRequest, now time.Time, lease time.Duration) Attempt {
	return refundAttempt(scope, key, req, req.Canonical(), now, lease)
}

// refundAttempt is NewRefundAttempt of req's canonical form, already made.
func refundAttempt(scope, key string, req RefundRequest, canonical []byte, now time.Time, lease time.Duration) Attempt {
	a := newAttempt(KindRefund, scope, key, NewRefundID(), canonical, req.Amount, "", now, lease)
	a.PaymentID = req.PaymentID
	a.Details = marshalLine(refundDetails{Reason: req.Reason})
	return a
}

// Refund gives back req.Amount (all that is left if 0) of the payment
// req.PaymentID in scope, at most once under (scope, key), through the
// same flow as Pay. The amount is reserved on the payment in the claim, so
// refunds that together exceed the payment never all reach the provider.
func (s *Service) Refund(ctx context.Context, scope, key string, req RefundRequest) (Result, error) {
	canonical := req.Canonical()
	return s.once(ctx, asked(KindRefund, scope, key, canonical), func() Attempt {
		return refundAttempt(scope, key, req, canonical, s.Now(), s.Lease)
	})
}

// Refunds returns the refunds of the payment id in scope, oldest first.
func (s *Service) Refunds(ctx context.Context, scope, id string) ([]RefundView, error) {
	if _, err := s.Store.Payment(ctx, scope, id); err != nil {
		return nil, err
	}
	rs, err := s.Store.Refunds(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	views := make([]RefundView, 0, len(rs))
	for _, r := range rs {
		views = append(views, r.View())
	}
	return views, nil
}

// refunds is the operation of a refund: one provider refund of a charge.
type refunds struct{ s *Service }

func (r refunds) request(ctx context.Context, a Attempt) (RefundRequest, string, error) {
	var req RefundRequest
	if err := json.Unmarshal(a.Request, &req); err != nil { // our own canonical JSON
		return req, "", err
	}
	p, err := r.s.Store.Payment(ctx, a.Scope, a.PaymentID)
	if err != nil {
		return req, "", err
	}
	return req, p.ChargeID, nil
}

func (r refunds) move(ctx context.Context, a Attempt) (Outcome, error) {
	req, chargeID, err := r.request(ctx, a)
	if err != nil {
		return Outcome{}, err
	}
	start := time.Now()
	pr, err := r.s.Provider.Refund(ctx, ProviderRefundRequest{
		IdempotencyKey: RefundDownstreamKey(a.Scope, a.Key), RefundID: a.ID, PaymentID: a.PaymentID,
		ChargeID: chargeID, Amount: a.Amount, Currency: a.Currency, Reason: req.Reason,
	})
	if o, final, err := r.s.answered("refund", start, err, func(d *DeclineError) Outcome { return refundDeclinedOutcome(a, d) },
		func() Outcome { return r.keyReused(a) }); final || err != nil {
		return o, err
	}
	return r.outcome(a, pr), nil
}

func (r refunds) find(ctx context.Context, a Attempt) (Outcome, bool, error) {
	_, chargeID, err := r.request(ctx, a)
	if err != nil {
		return Outcome{}, false, err
	}
	start := time.Now()
	pr, found, err := r.s.Provider.LookupRefund(ctx, RefundLookup{
		IdempotencyKey: RefundDownstreamKey(a.Scope, a.Key), ChargeID: chargeID, CreatedAt: a.CreatedAt,
	})
	r.s.observe("refund_lookup", callResult(found, err), start)
	if d, declined := IsDecline(err); declined { // it holds a refund that gave nothing back
		return refundDeclinedOutcome(a, d), true, nil
	}
	if err != nil || !found {
		return Outcome{}, false, err
	}
	return r.outcome(a, pr), true, nil
}

func (r refunds) outcome(a Attempt, pr ProviderRefund) Outcome {
	if pr.Amount != a.Amount || pr.Currency != a.Currency {
		return r.keyReused(a)
	}
	a.Status, a.ChargeID = Succeeded, pr.ID
	body := a.RefundView().Body()
	return Outcome{Status: Succeeded, ResponseStatus: 201, ResponseBody: body, ChargeID: pr.ID, view: body}
}

func (r refunds) keyReused(a Attempt) Outcome {
	r.s.Log.Warn("provider holds this key for another refund", "refund_id", a.ID)
	p := Problem{
		Type: ProblemKeyReused, Title: "Idempotency-Key reused", Status: 409,
		Detail:    "The payment provider already holds this Idempotency-Key for a different refund. Nothing was refunded. Use a new key for a new refund.",
		PaymentID: a.PaymentID, RefundID: a.ID,
	}
	return Outcome{Status: Failed, ResponseStatus: 409, ResponseBody: p.Body(), FailureCode: "provider_key_reused"}
}

func (refunds) notCompleted(a Attempt) Outcome {
	p := Problem{
		Type: ProblemRefundNotDone, Title: "Refund not completed", Status: 402,
		Detail:    "This refund was abandoned before the provider made it; nothing was refunded. Start a new refund with a new Idempotency-Key.",
		PaymentID: a.PaymentID, RefundID: a.ID,
	}
	return Outcome{Status: Failed, ResponseStatus: 402, ResponseBody: p.Body(), FailureCode: "not_completed"}
}

// unknown names the refund and its payment, as every refund problem does.
func (refunds) unknown(a Attempt) error {
	e := Errorf(EOUTCOMEUNKNOWN, "The payment provider's answer was lost; the refund may or may not have been made. Retry with the same Idempotency-Key to learn the outcome.")
	e.PaymentID, e.RefundID = a.PaymentID, a.ID
	return e
}

func refundDeclinedOutcome(a Attempt, d *DeclineError) Outcome {
	p := Problem{
		Type: ProblemRefundDeclined, Title: "Refund declined", Status: 402,
		Detail: d.Message, PaymentID: a.PaymentID, RefundID: a.ID, DeclineCode: d.Code,
	}
	return Outcome{Status: Failed, ResponseStatus: 402, ResponseBody: p.Body(), FailureCode: d.Code}
}

// RefundView is the public JSON of a refund: the 201 body, and an item of
// GET /v1/payments/{id}/refunds and of the payment's refunds.
type RefundView struct {
	ID               string `json:"id"`
	Object           string `json:"object"`
	PaymentID        string `json:"payment_id"`
	Status           Status `json:"status"`
	Amount           int64  `json:"amount"`
	Currency         string `json:"currency"`
	Reason           string `json:"reason,omitempty"`
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	FailureCode      string `json:"failure_code,omitempty"`
	// IdempotencyKey is absent once the key's record was purged.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	CreatedAt      string `json:"created_at"`
}

// View is the refund's public JSON.
func (r *Refund) View() RefundView {
	var d refundDetails
	_ = json.Unmarshal(r.Details, &d) // our own JSON
	return RefundView{
		ID: r.ID, Object: "refund", PaymentID: r.PaymentID, Status: r.Status,
		Amount: r.Amount, Currency: r.Currency, Reason: d.Reason,
		ProviderRefundID: r.ProviderRefundID, FailureCode: r.FailureCode,
		IdempotencyKey: r.Key, CreatedAt: formatTime(r.CreatedAt),
	}
}

// RefundView is the public JSON of the refund attempt a made.
func (a *Attempt) RefundView() RefundView {
	r := Refund{
		ID: a.ID, Scope: a.Scope, PaymentID: a.PaymentID, Key: a.Key, Amount: a.Amount, Currency: a.Currency,
		Status: a.Status, ProviderRefundID: a.ChargeID, FailureCode: a.FailureCode, Details: a.Details, CreatedAt: a.CreatedAt,
	}
	return r.View()
}

// Body is the view's JSON, newline-terminated.
func (v RefundView) Body() []byte { return marshalLine(v) }

// RefundDownstreamKey is the idempotency key oncepay gives the provider for
// the refund under (scope, key): stable across retries, and never equal to a
// payment's downstream key.
func RefundDownstreamKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte("refund"))
	return "oncepay_re_" + hex.EncodeToString(h.Sum(nil))[:48]
}

// NewRefundID returns a fresh public refund id, time-ordered like a
// payment's.
func NewRefundID() string { return refundIDAt(time.Now()) }

func refundIDAt(t time.Time) string {
	return "re_" + strings.ToUpper(strconv.FormatInt(t.UnixMicro(), 36)) + rand.Text()[:16]
}
