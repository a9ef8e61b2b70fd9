package payment

import (
	"errors"
	"fmt"
)

// Error codes: the failure classes the HTTP layer maps to a status and a
// problem type. Anything else is internal.
const (
	EINVALID        = "invalid"         // the request is malformed
	EKEY            = "key"             // the Idempotency-Key header is missing or malformed
	EUNAUTHORIZED   = "unauthorized"    // no valid API key
	ENOTFOUND       = "not_found"       // no such payment in this scope
	EKEYREUSED      = "key_reused"      // same key, different request
	EINPROGRESS     = "in_progress"     // the first request with this key still runs
	EOUTCOMEUNKNOWN = "outcome_unknown" // the provider's answer was lost; retry with the same key
	EUNAVAILABLE    = "unavailable"     // the database is busy or full
	EKEYEXPIRED     = "key_expired"     // the key's record was purged; its payment is still known
	ENOTREFUNDABLE  = "not_refundable"  // the payment did not succeed
	EREFUNDEXCEEDS  = "refund_exceeds"  // more than what is left to refund
	EINTERNAL       = "internal"
)

// Error is a domain error with a code the HTTP layer maps and a message safe
// to show the client.
type Error struct {
	Code    string
	Message string
	// Param names the request field at fault, as Stripe's errors do:
	// "amount", "metadata[order_id]". Empty when no one field is.
	Param     string
	PaymentID string // the payment the error is about, shown to the client
	RefundID  string // the refund the error is about, shown to the client
	Err       error  // the cause, for logs only
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted client-safe message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf returns an EINVALID *Error about the request field param.
func Invalidf(param, format string, args ...any) *Error {
	return &Error{Code: EINVALID, Message: fmt.Sprintf(format, args...), Param: param}
}

// ErrorParam returns the request field err is about, "" if none.
func ErrorParam(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Param
	}
	return ""
}

// ErrorCode returns the code of err, EINTERNAL for errors that are not *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the client-safe message of err; internal errors get a
// generic one, never their own text.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}

// Of returns err's *Error, if it is one.
func Of(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
