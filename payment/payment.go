// Package payment is oncepay's domain: the attempt a client's idempotency key
// names, the claim/charge/record flow that makes a retried payment charge at
// most once, and the interfaces the store and the provider implement.
package payment

import (
	"context"
	"time"
)

// Status is where an attempt stands.
type Status string

const (
	// InProgress: claimed, outcome not yet recorded.
	InProgress Status = "in_progress"
	// Succeeded: the provider charged; the 201 is stored.
	Succeeded Status = "succeeded"
	// Failed: definitively not charged (declined, or reconciled as never
	// charged); the 4xx is stored.
	Failed Status = "failed"
)

// Attempt is the row an idempotency key claims: one payment intent of one
// merchant (scope), and the response every retry of it gets.
type Attempt struct {
	Scope          string
	Key            string
	ID             string // public payment id, "pay_..."
	RequestHash    []byte // SHA-256 of Request
	Request        []byte // canonical JSON of the validated request
	Amount         int64
	Currency       string
	Status         Status
	Fence          int64     // bumped by every takeover; guards Record
	LeaseExpiresAt time.Time // zero when no owner holds the attempt
	ResponseStatus int       // zero until final
	ResponseBody   []byte    // the exact bytes replayed
	ChargeID       string
	FailureCode    string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// LeaseLive reports whether an owner still holds the attempt at now.
func (a *Attempt) LeaseLive(now time.Time) bool {
	return a.Status == InProgress && a.LeaseExpiresAt.After(now)
}

// Stale reports whether reconcile may settle the attempt at now: in
// progress, no live lease, and untouched for staleAfter. Measured from the
// last update (a claim, a takeover, a release), not from creation: a retry
// that took the attempt over a minute ago may still have a charge in flight.
func (a *Attempt) Stale(now time.Time, staleAfter time.Duration) bool {
	return a.Status == InProgress && !a.LeaseLive(now) && !a.UpdatedAt.After(now.Add(-staleAfter))
}

// Answer is what a duplicate request is decided by: the stored fingerprint,
// where the attempt stands, and once final the exact response. A replay
// reads this much and no more.
type Answer struct {
	RequestHash    []byte
	Status         Status
	LeaseExpiresAt time.Time // zero when no owner holds the attempt
	ResponseStatus int       // zero until final
	ResponseBody   []byte
}

// Outcome is the final result an owner records.
type Outcome struct {
	Status         Status
	ResponseStatus int
	ResponseBody   []byte
	ChargeID       string
	FailureCode    string
}

// Store keeps attempts. A duplicate claim is a result, not an error.
type Store interface {
	// Claim inserts a, unless (a.Scope, a.Key) exists. claimed is true when
	// this call created the row and so owns the attempt.
	Claim(ctx context.Context, a *Attempt) (claimed bool, err error)

	// Attempt returns the attempt for (scope, key) or an ENOTFOUND error.
	Attempt(ctx context.Context, scope, key string) (*Attempt, error)

	// Answer returns what a duplicate of (scope, key) is decided by, or an
	// ENOTFOUND error: Attempt's fields that a replay needs, read alone.
	Answer(ctx context.Context, scope, key string) (*Answer, error)

	// AttemptByID returns the attempt with payment id within scope.
	AttemptByID(ctx context.Context, scope, id string) (*Attempt, error)

	// TakeOver gives the attempt a new owner if it is still in progress under
	// fence and no lease is live at now. It returns the new fence.
	TakeOver(ctx context.Context, scope, key string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error)

	// Record stores the final outcome if the attempt is still in progress
	// under fence. ok is false when another owner or reconcile got there first.
	Record(ctx context.Context, scope, key string, fence int64, o Outcome, now time.Time) (ok bool, err error)

	// Release drops the owner's lease, so the client's retry can take over at
	// once. It does nothing if fence no longer owns the attempt.
	Release(ctx context.Context, scope, key string, fence int64, now time.Time) error

	// Stale returns up to limit attempts in progress, last updated at or
	// before updatedBefore, with no live lease at now, oldest first: those
	// Attempt.Stale reports.
	Stale(ctx context.Context, updatedBefore, now time.Time, limit int) ([]Attempt, error)

	// Purge deletes up to limit final attempts last updated before before,
	// never one in progress, and returns how many.
	Purge(ctx context.Context, before time.Time, limit int) (int, error)
}

// KeyStore authenticates merchant API keys.
type KeyStore interface {
	// Authenticate returns the scope (the merchant id) of a live API key, or
	// an EUNAUTHORIZED error.
	Authenticate(ctx context.Context, secret string) (scope string, err error)
}

// Merchant is an account: the scope of its payments and idempotency keys,
// which every one of its API keys shares, so a key can be rotated without a
// retry across the switch being taken for a new payment.
type Merchant struct {
	ID        string
	Name      string
	CreatedAt time.Time
	LiveKeys  int // API keys not revoked
}

// APIKey is a merchant's credential; its secret is shown once at creation
// and only its hash is stored.
type APIKey struct {
	ID         string
	MerchantID string
	Name       string
	CreatedAt  time.Time
	RevokedAt  time.Time // zero while live
}

// AttemptFilter selects attempts for the admin page.
type AttemptFilter struct {
	Status Status // "" for all
	Search string // an idempotency key prefix, a payment id or a charge id
	Limit  int
	Offset int
}

// ListedAttempt is an attempt with the name of the merchant it belongs to.
type ListedAttempt struct {
	Attempt
	Merchant string
}

// AdminStore is what the admin page reads, across every merchant.
type AdminStore interface {
	ListAttempts(ctx context.Context, f AttemptFilter) ([]ListedAttempt, error)
	Counts(ctx context.Context) (map[Status]int, error)
	// CountStale counts the attempts Store.Stale would return, unlimited.
	CountStale(ctx context.Context, updatedBefore, now time.Time) (int, error)
	// AttemptByPaymentID finds an attempt by payment id in any scope.
	AttemptByPaymentID(ctx context.Context, id string) (*ListedAttempt, error)
}
