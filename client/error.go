package client

import (
	"errors"
	"fmt"
)

// Problem types: the stable "type" of every problem the API answers, as the
// OpenAPI document (web/openapi.yaml, ProblemType) lists them. Branch on
// these, never on a title or detail.
const (
	ProblemInvalidRequest      = "/problems/invalid-request"
	ProblemInvalidKey          = "/problems/invalid-idempotency-key"
	ProblemUnauthorized        = "/problems/unauthorized"
	ProblemNotFound            = "/problems/not-found"
	ProblemMethodNotAllowed    = "/problems/method-not-allowed"
	ProblemKeyReused           = "/problems/idempotency-key-reused"
	ProblemKeyExpired          = "/problems/idempotency-key-expired"
	ProblemInProgress          = "/problems/request-in-progress"
	ProblemDeclined            = "/problems/payment-declined"
	ProblemNotCompleted        = "/problems/payment-not-completed"
	ProblemOutcomeUnknown      = "/problems/payment-outcome-unknown"
	ProblemUnavailable         = "/problems/service-unavailable"
	ProblemTooLarge            = "/problems/request-too-large"
	ProblemUnsupportedMedia    = "/problems/unsupported-media-type"
	ProblemUnsupportedEncoding = "/problems/unsupported-content-encoding"
	ProblemCrossOrigin         = "/problems/cross-origin-request"
	ProblemTooManyRequests     = "/problems/too-many-requests"
	ProblemInternal            = "/problems/internal-error"
	ProblemNotRefundable       = "/problems/payment-not-refundable"
	ProblemRefundExceeds       = "/problems/refund-exceeds-remaining"
	ProblemRefundDeclined      = "/problems/refund-declined"
	ProblemRefundNotCompleted  = "/problems/refund-not-completed"
)

// Problem is an RFC 9457 problem details body, the OpenAPI document's
// Problem schema.
type Problem struct {
	Type   string `json:"type"` // one of the Problem* constants
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Param names the request field an invalid-request problem is about
	// ("amount", "metadata[order_id]"), as Stripe's errors do.
	Param       string `json:"param,omitempty"`
	PaymentID   string `json:"payment_id,omitempty"`
	RefundID    string `json:"refund_id,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
}

// Error is an answer from the server other than success: its problem. An
// answer that was not a problem document (from a proxy, say) has only
// Status and Title.
type Error struct {
	Problem
}

func (e *Error) Error() string {
	s := fmt.Sprintf("oncepay: %d", e.Status)
	if e.Type != "" {
		s += " " + e.Type
	}
	s += ": " + e.Title
	if e.Param != "" {
		s += " (" + e.Param + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// final reports whether the answer settles the request: everything but a
// request still in progress and a 5xx, which leave the outcome unknown.
func (e *Error) final() bool {
	return e.Status < 500 && !(e.Status == 409 && e.Type == ProblemInProgress)
}

// IsDeclined reports whether err is the provider's decline of the payment:
// final, nothing charged. Ask for another payment method and make a new
// intent for it.
func IsDeclined(err error) bool { return problemType(err) == ProblemDeclined }

// IsKeyReused reports whether err says the intent's key already named a
// different payment or refund: final, and a bug in the caller, since an
// intent's request never changes.
func IsKeyReused(err error) bool { return problemType(err) == ProblemKeyReused }

// errNoAnswer marks the errors after which the outcome is unknown because
// no answer of oncepay's came back: the request may have been served.
var errNoAnswer = errors.New("no answer from the server")

// IsRetryable reports whether err leaves the outcome of a payment or refund
// unknown (a network error, a 503, attempts or ctx run out): the money may
// or may not have moved, and sending the same intent again, with its same
// key, finds out without moving it twice. False for nil and final answers.
func IsRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return !e.final()
	}
	return errors.Is(err, errNoAnswer)
}

func problemType(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Type
	}
	return ""
}
