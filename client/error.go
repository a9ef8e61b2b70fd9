package client

import (
	"errors"
	"fmt"

	"github.com/oncepay/oncepay/payment"
)

// Error is an answer from the server other than success: its RFC 9457
// problem, whose Type is one of the payment.Problem* constants. An
// invalid-request problem names the field at fault in Param ("amount",
// "metadata[order_id]"), as Stripe's errors do. An answer that was not a
// problem document (from a proxy, say) has only Status and Title.
type Error struct {
	payment.Problem
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
	return e.Status < 500 && !(e.Status == 409 && e.Type == payment.ProblemInProgress)
}

// IsDeclined reports whether err is the provider's decline of the payment:
// final, nothing charged. Ask for another payment method and make a new
// intent for it.
func IsDeclined(err error) bool { return problemType(err) == payment.ProblemDeclined }

// IsKeyReused reports whether err says the intent's key already named a
// different payment: final, and a bug in the caller, since an intent's
// request never changes.
func IsKeyReused(err error) bool { return problemType(err) == payment.ProblemKeyReused }

// errNoAnswer marks the errors after which the outcome is unknown because
// no answer of oncepay's came back: the request may have been served.
var errNoAnswer = errors.New("no answer from the server")

// IsRetryable reports whether err leaves the payment's outcome unknown
// (a network error, a 503, attempts or ctx run out): the payment may or may
// not have been charged, and paying the same intent again, with its same
// key, finds out without charging twice. False for nil and final answers.
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
