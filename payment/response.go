package payment

import (
	"encoding/json"
	"time"
)

// Problem types: stable identifiers of every error a client can get, as RFC
// 9457 "type" URI references. Clients branch on these, never on titles.
const (
	ProblemInvalidRequest      = "/problems/invalid-request"
	ProblemInvalidKey          = "/problems/invalid-idempotency-key"
	ProblemUnauthorized        = "/problems/unauthorized"
	ProblemNotFound            = "/problems/not-found"
	ProblemMethodNotAllowed    = "/problems/method-not-allowed"
	ProblemKeyReused           = "/problems/idempotency-key-reused"
	ProblemInProgress          = "/problems/request-in-progress"
	ProblemDeclined            = "/problems/payment-declined"
	ProblemNotCompleted        = "/problems/payment-not-completed"
	ProblemOutcomeUnknown      = "/problems/payment-outcome-unknown"
	ProblemUnavailable         = "/problems/service-unavailable"
	ProblemTooLarge            = "/problems/request-too-large"
	ProblemUnsupportedMedia    = "/problems/unsupported-media-type"
	ProblemUnsupportedEncoding = "/problems/unsupported-content-encoding"
	ProblemInternal            = "/problems/internal-error"
	ProblemCrossOrigin         = "/problems/cross-origin-request"
	ProblemTooManyRequests     = "/problems/too-many-requests"
	ProblemKeyExpired          = "/problems/idempotency-key-expired"
	ProblemNotRefundable       = "/problems/payment-not-refundable"
	ProblemRefundExceeds       = "/problems/refund-exceeds-remaining"
	ProblemRefundDeclined      = "/problems/refund-declined"
	ProblemRefundNotDone       = "/problems/refund-not-completed"
	// ProblemReplicaBehind is GET /healthz's 503 while the replica of the
	// SQLite file is further behind than allowed (--replica-max-lag).
	ProblemReplicaBehind = "/problems/replica-behind"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Param names the request field an invalid-request problem is about.
	Param       string `json:"param,omitempty"`
	PaymentID   string `json:"payment_id,omitempty"`
	RefundID    string `json:"refund_id,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
}

// RetryAfterSeconds is what a client waits before retrying a 409 in
// progress or a 503: short, since the owner's call or the database usually
// finishes well within it.
const RetryAfterSeconds = 1

// errorClass is what one error code becomes: the problem a client sees and
// the outcome metrics and logs count. The one table of that mapping.
type errorClass struct {
	typ, title string
	status     int
	outcome    string
}

var errorClasses = map[string]errorClass{
	EINVALID:        {ProblemInvalidRequest, "Invalid request", 400, "bad_request"},
	EKEY:            {ProblemInvalidKey, "Invalid Idempotency-Key", 400, "bad_request"},
	EUNAUTHORIZED:   {ProblemUnauthorized, "Unauthorized", 401, "unauthorized"},
	ENOTFOUND:       {ProblemNotFound, "Not found", 404, "not_found"},
	EKEYREUSED:      {ProblemKeyReused, "Idempotency-Key reused", 409, "key_reused"},
	EINPROGRESS:     {ProblemInProgress, "Request in progress", 409, "in_progress"},
	EOUTCOMEUNKNOWN: {ProblemOutcomeUnknown, "Payment outcome unknown", 503, "outcome_unknown"},
	EUNAVAILABLE:    {ProblemUnavailable, "Service unavailable", 503, "unavailable"},
	EINTERNAL:       {ProblemInternal, "Internal error", 500, "internal"},
	EKEYEXPIRED:     {ProblemKeyExpired, "Idempotency-Key expired", 409, "key_expired"},
	ENOTREFUNDABLE:  {ProblemNotRefundable, "Payment not refundable", 409, "not_refundable"},
	EREFUNDEXCEEDS:  {ProblemRefundExceeds, "Refund exceeds what is left", 409, "refund_exceeds"},
}

func classOf(err error) errorClass {
	if c, ok := errorClasses[ErrorCode(err)]; ok {
		return c
	}
	return errorClasses[EINTERNAL]
}

// ProblemOf maps an error to the problem a client sees. Internal errors get
// a bare 500 whose detail never carries their text.
func ProblemOf(err error) Problem {
	c := classOf(err)
	p := Problem{Type: c.typ, Title: c.title, Status: c.status, Detail: ErrorMessage(err), Param: ErrorParam(err)}
	if e, ok := Of(err); ok {
		p.PaymentID, p.RefundID = e.PaymentID, e.RefundID
	}
	return p
}

// OutcomeOf names the outcome of a request answered with err, for metrics
// and the request log.
func OutcomeOf(err error) string { return classOf(err).outcome }

// Retryable reports whether the client should retry the same request after
// Retry-After: the first request still runs, or the outcome is not known yet.
func (p Problem) Retryable() bool {
	return p.Type == ProblemInProgress || p.Type == ProblemOutcomeUnknown || p.Type == ProblemUnavailable
}

// Body is the problem's JSON, newline-terminated.
func (p Problem) Body() []byte { return marshalLine(p) }

// View is the public JSON of a payment: the 201 body, and what
// GET /v1/payments/{id} returns.
type View struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Status         Status            `json:"status"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	ChargeID       string            `json:"charge_id,omitempty"`
	FailureCode    string            `json:"failure_code,omitempty"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	AmountRefunded int64             `json:"amount_refunded"`
	Refunds        []RefundView      `json:"refunds"`
	// Dispute is present once the provider told of a dispute; the status
	// stays succeeded.
	Dispute *Dispute `json:"dispute,omitempty"`
	// IdempotencyKey is absent once the key's record was purged.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	CreatedAt      string `json:"created_at"`
}

// paymentDetails is what a payment keeps of its request besides the amount
// and currency: Payment.Details.
type paymentDetails struct {
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// View is the payment's public JSON, with its refunds.
func (p *Payment) View(refunds []Refund) View {
	var d paymentDetails
	_ = json.Unmarshal(p.Details, &d) // our own JSON; none in a row migrated without it
	v := View{
		ID:             p.ID,
		Object:         "payment",
		Status:         p.Status,
		Amount:         p.Amount,
		Currency:       p.Currency,
		ChargeID:       p.ChargeID,
		FailureCode:    p.FailureCode,
		Description:    d.Description,
		Metadata:       d.Metadata,
		AmountRefunded: p.AmountRefunded,
		Refunds:        make([]RefundView, 0, len(refunds)),
		IdempotencyKey: p.Key,
		CreatedAt:      formatTime(p.CreatedAt),
		Dispute:        p.Dispute,
	}
	for _, r := range refunds {
		v.Refunds = append(v.Refunds, r.View())
	}
	return v
}

// View builds the attempt's public JSON from what is stored, so a response
// built later (by reconcile, or by a takeover) has the same bytes a live
// request would have stored. A new payment has no refunds.
func (a *Attempt) View() View {
	var r Request
	_ = json.Unmarshal(a.Request, &r) // a.Request is our own canonical JSON
	p := Payment{
		ID: a.ID, Key: a.Key, Amount: a.Amount, Currency: a.Currency, Status: a.Status,
		ChargeID: a.ChargeID, FailureCode: a.FailureCode, CreatedAt: a.CreatedAt,
		Details: marshalLine(paymentDetails{Description: r.Description, Metadata: r.Metadata}),
	}
	return p.View(nil)
}

// Body is the view's JSON, newline-terminated.
func (v View) Body() []byte { return marshalLine(v) }

// SucceededOutcome is what an owner, or reconcile, records when the
// provider charged.
func SucceededOutcome(a Attempt, c Charge) Outcome {
	a.Status, a.ChargeID = Succeeded, c.ID
	body := a.View().Body()
	return Outcome{Status: Succeeded, ResponseStatus: 201, ResponseBody: body, ChargeID: c.ID, view: body}
}

// declinedOutcome is what an owner records when the provider declined.
func declinedOutcome(a Attempt, d *DeclineError) Outcome {
	p := Problem{
		Type: ProblemDeclined, Title: "Payment declined", Status: 402,
		Detail: d.Message, PaymentID: a.ID, DeclineCode: d.Code,
	}
	return Outcome{Status: Failed, ResponseStatus: 402, ResponseBody: p.Body(), FailureCode: d.Code}
}

// providerKeyReusedOutcome is what an owner records when the provider
// holds this key for another payment: final, nothing charged, a new key
// is needed.
func providerKeyReusedOutcome(a Attempt) Outcome {
	p := Problem{
		Type: ProblemKeyReused, Title: "Idempotency-Key reused", Status: 409,
		Detail:    "The payment provider already holds this Idempotency-Key for a different payment (it was used before, and forgotten here after the retention). Nothing was charged. Use a new key for a new payment.",
		PaymentID: a.ID,
	}
	return Outcome{Status: Failed, ResponseStatus: 409, ResponseBody: p.Body(), FailureCode: "provider_key_reused"}
}

// NotCompletedOutcome is what reconcile records when the provider never
// charged an abandoned attempt: final, so this key is spent.
func NotCompletedOutcome(a Attempt) Outcome {
	p := Problem{
		Type: ProblemNotCompleted, Title: "Payment not completed", Status: 402,
		Detail:    "This payment was abandoned before the provider charged it; nothing was charged. Start a new payment with a new Idempotency-Key.",
		PaymentID: a.ID,
	}
	return Outcome{Status: Failed, ResponseStatus: 402, ResponseBody: p.Body(), FailureCode: "not_completed"}
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func marshalLine(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("payment: marshal: " + err.Error()) // fixed struct types always marshal
	}
	return append(b, '\n')
}
