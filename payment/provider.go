package payment

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Provider is the payment provider oncepay protects: the system that moves
// money. Every call carries the downstream idempotency key, so the provider
// dedupes on the same identity oncepay does.
type Provider interface {
	// Charge moves money once per key. The same key with the same parameters
	// returns the same charge; the same key with other parameters is an error
	// wrapping ErrProviderKeyReused. That and a *DeclineError are definitive
	// answers (nothing was charged); any other error means the outcome is
	// unknown.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)

	// Lookup asks whether a charge exists for req.IdempotencyKey. found is
	// false when the provider has definitely not charged under this key; an
	// error means the answer is not known.
	Lookup(ctx context.Context, req LookupRequest) (c Charge, found bool, err error)

	// Refund gives back req.Amount of the charge req.ChargeID once per key,
	// with the same rules as Charge: the same key and parameters return the
	// same refund, other parameters are ErrProviderKeyReused, a
	// *DeclineError is a definitive refusal, any other error is unknown.
	Refund(ctx context.Context, req ProviderRefundRequest) (ProviderRefund, error)

	// LookupRefund asks whether a refund exists for req.IdempotencyKey.
	// found is false when the provider has definitely not refunded under
	// this key and holds nothing under it; a *DeclineError means it holds a
	// refund under the key that gave nothing back (failed, canceled), a
	// definitive answer: asking it to refund again under that key would
	// only replay its first answer. Any other error means the answer is
	// not known.
	LookupRefund(ctx context.Context, req RefundLookup) (r ProviderRefund, found bool, err error)
}

// ProviderRefundRequest is what the provider is asked to refund.
type ProviderRefundRequest struct {
	IdempotencyKey string
	RefundID       string // oncepay's refund id, for the provider's records
	PaymentID      string // oncepay's payment id
	ChargeID       string // the provider's id of the charge refunded
	Amount         int64
	Currency       string
	Reason         string // "" or one of RefundReasons
}

// RefundLookup names the refund LookupRefund asks for.
type RefundLookup struct {
	IdempotencyKey string
	ChargeID       string    // the charge refunded: a provider that cannot look up by key lists its refunds
	CreatedAt      time.Time // when the refund was claimed
}

// ProviderRefund is the provider's record of money given back.
type ProviderRefund struct {
	ID             string    `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	ChargeID       string    `json:"charge_id"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	CreatedAt      time.Time `json:"created_at"`
	// Status is what a ledger that lists its refunds says of one
	// (succeeded, or failed: it gave nothing back); "" where not told.
	Status string `json:"status,omitempty"`
}

// ChargeRequest is what the provider is asked to charge.
type ChargeRequest struct {
	IdempotencyKey string
	PaymentID      string // oncepay's payment id, for the provider's records
	Amount         int64
	Currency       string // ISO 4217, upper case
	Source         string
	Description    string
}

// LookupRequest names the charge Lookup asks for.
type LookupRequest struct {
	IdempotencyKey string
	// CreatedAt is when the attempt was claimed: no charge under the key is
	// older. A provider that cannot look up by key (Stripe) lists its
	// charges from then on instead.
	CreatedAt time.Time
}

// ErrProviderKeyReused is a provider's definitive answer that the
// downstream key already names another payment (other amount, currency or
// source): nothing new was charged, and asking again changes nothing. It
// happens when a client reuses an Idempotency-Key that oncepay forgot after
// the retention but the provider still remembers.
var ErrProviderKeyReused = errors.New("the provider's idempotency key names another payment")

// ErrProviderUnavailable is a provider's refusal of oncepay itself (its
// credentials are wrong or lack a permission): the request was not taken,
// and no retry helps until an operator acts. It is never a decline.
var ErrProviderUnavailable = errors.New("the provider refused oncepay's credentials")

// Charge is the provider's record of money moved.
type Charge struct {
	ID             string    `json:"id"`
	IdempotencyKey string    `json:"idempotency_key"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	CreatedAt      time.Time `json:"created_at"`
}

// matches reports whether c is the charge a asked for: a charge found under
// a's downstream key for another amount or currency is another payment's.
func (c Charge) matches(a Attempt) bool {
	return c.Amount == a.Amount && c.Currency == a.Currency
}

// DeclineError is a provider's definitive refusal: nothing was charged, and
// asking again with the same parameters gets the same answer.
type DeclineError struct {
	Code    string // machine-readable reason, e.g. "insufficient_funds"
	Message string // human-readable reason
}

func (e *DeclineError) Error() string {
	return fmt.Sprintf("payment declined: %s (%s)", e.Message, e.Code)
}

// IsDecline reports whether err is a definitive decline and returns it.
func IsDecline(err error) (*DeclineError, bool) {
	var d *DeclineError
	ok := errors.As(err, &d)
	return d, ok
}

// DisputeLooker is a provider that can say what it holds of a dispute: a
// dispute event is applied only as the provider confirms it. (An optional
// interface: a provider without it leaves dispute events failed, unapplied.)
type DisputeLooker interface {
	// LookupDispute returns the dispute id as the provider holds it now. An
	// error wrapping ErrNoDispute means it has none by that id; any other
	// error means the answer is not known.
	LookupDispute(ctx context.Context, id string) (ProviderDispute, error)
}

// ProviderDispute is the provider's record of a dispute.
type ProviderDispute struct {
	Dispute
	Currency string `json:"currency"`
	// ChargeID is the charge disputed, as oncepay stored it (Payment.ChargeID:
	// Stripe's PaymentIntent, the sim's charge).
	ChargeID string `json:"charge_id"`
	// PaymentID is oncepay's payment id, as the charge carries it.
	PaymentID string `json:"payment_id"`
}

// ErrNoDispute is a provider's answer that it holds no dispute by that id.
var ErrNoDispute = errors.New("the provider has no such dispute")
