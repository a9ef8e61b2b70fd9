// Package payment is oncepay's domain: the attempt a client's idempotency key
// names, the claim/charge/record flow that makes a retried payment charge at
// most once, and the interfaces the store and the provider implement.
package payment

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
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

// Kind names an operation that moves money under a client's key. Every kind
// goes through the same claim, provider call, record, replay, takeover and
// reconcile (once.go); what differs is an operation (see operation).
type Kind string

const (
	KindPayment Kind = "payment"
	KindRefund  Kind = "refund"
)

// Attempt is the row an idempotency key claims: one operation (a payment or
// a refund) of one merchant (scope), and the response every retry of it
// gets. It is the key's record, purged after the retention; the payment or
// refund it made outlives it (Payment, Refund).
type Attempt struct {
	Scope     string
	Key       string
	Kind      Kind
	ID        string // public id of what it makes: "pay_..." or "re_..."
	PaymentID string // a refund's payment; "" for a payment
	// Details is the JSON the payment or refund keeps after this row is
	// purged: a payment's description and metadata, a refund's reason.
	Details        []byte
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
	// Provider names the provider the attempt's money moves through, as
	// the database is bound to it (Service.ProviderName), set at the claim:
	// a provider's event settles only the attempts made through it. ""
	// when not known (a row older than the binding).
	Provider  string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NewAttempt returns the attempt a new payment request claims under (scope,
// key) at now: in progress under fence 1, its owner's lease running for
// lease. req must be valid (ParseRequest).
func NewAttempt(scope, key string, req Request, now time.Time, lease time.Duration) Attempt {
	return paymentAttempt(scope, key, req, req.Canonical(), now, lease)
}

// paymentAttempt is NewAttempt of req's canonical form, already made.
func paymentAttempt(scope, key string, req Request, canonical []byte, now time.Time, lease time.Duration) Attempt {
	a := newAttempt(KindPayment, scope, key, NewPaymentID(), canonical, req.Amount, req.Currency, now, lease)
	a.Details = marshalLine(paymentDetails{Description: req.Description, Metadata: req.Metadata})
	return a
}

// newAttempt is the attempt of any kind a new claim inserts.
func newAttempt(kind Kind, scope, key, id string, canonical []byte, amount int64, currency string, now time.Time, lease time.Duration) Attempt {
	if scope == "" || !ValidKey(key) || lease < 0 {
		panic("payment: NewAttempt needs a scope, a valid key and a lease of zero or more") // callers validate first
	}
	a := Attempt{
		Scope: scope, Key: key, Kind: kind, ID: id,
		Request: canonical, RequestHash: fingerprint(canonical),
		Amount: amount, Currency: currency,
		Status: InProgress, Fence: 1, LeaseExpiresAt: now.Add(lease),
		CreatedAt: now, UpdatedAt: now,
	}
	return a
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
	// Event, if set, is the event of this change (ChangeEvent), which the
	// store writes in the transaction that records the outcome, and only
	// if it does record it.
	Event *OutboxEvent
	// view is the payment's or refund's JSON once o is recorded, when the
	// outcome's answer is that JSON already (a 201, a 202): the event's
	// data, not built twice.
	view []byte
}

// Payment is what oncepay keeps of a payment for as long as the payment
// retention, after its key's record (the Attempt) is purged.
type Payment struct {
	ID             string
	Scope          string
	Key            string // "" once the key's record was purged
	KeyHash        []byte // KeyHash(Key), kept so a late retry is told, not charged
	Amount         int64
	Currency       string
	Status         Status
	ChargeID       string
	FailureCode    string
	AmountRefunded int64 // refunds that succeeded
	AmountReserved int64 // refunds in progress
	Details        []byte
	// Dispute is the cardholder's dispute the provider told of, nil if
	// none: the payment stays succeeded, the dispute says what became of it.
	Dispute   *Dispute
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Dispute is a cardholder's dispute of a payment, as the provider reports
// it (Stripe's Dispute object): its id, status (warning_needs_response,
// warning_under_review, warning_closed, needs_response, under_review, won,
// lost), reason and the amount disputed, in the payment's currency.
type Dispute struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Amount int64  `json:"amount"`
}

// DisputeClosedStatuses are the statuses a dispute ends in: once in one,
// an event that says it is open again (a late charge.dispute.created) is
// older news and changes nothing.
var DisputeClosedStatuses = []string{"won", "lost", "warning_closed"}

// Closed reports whether the dispute has ended.
func (d *Dispute) Closed() bool {
	for _, s := range DisputeClosedStatuses {
		if d.Status == s {
			return true
		}
	}
	return false
}

// Refundable is what is left to refund: nothing is promised twice.
func (p *Payment) Refundable() int64 { return p.Amount - p.AmountRefunded - p.AmountReserved }

// Refund is what oncepay keeps of a refund, as long as its payment.
type Refund struct {
	ID               string
	Scope            string
	PaymentID        string
	Key              string // "" once the key's record was purged
	Amount           int64
	Currency         string
	Status           Status
	ProviderRefundID string
	FailureCode      string
	Details          []byte
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Store keeps attempts, and the payments and refunds they make. A duplicate
// claim is a result, not an error.
type Store interface {
	// The forward queue of payments taken while the provider could not be
	// reached (offline.go).
	QueueStore
	// The events of the changes Record, Queue and Forwarded make, each
	// written in the change's own transaction (outbox.go).
	OutboxStore

	// Claim inserts a, unless (a.Scope, a.Key) exists. claimed is true when
	// this call created the row and so owns the attempt. In the same
	// transaction it creates what a makes: a payment, or a refund, whose
	// amount it first reserves on its payment with one guarded UPDATE
	// (a.Amount 0: all that is left; a.Amount and a.Currency are set to
	// what was reserved). Nothing is written when it refuses: EKEYEXPIRED
	// (a.Key's record was purged but its payment or refund is kept),
	// ENOTFOUND (no such payment in a.Scope), ENOTREFUNDABLE, EREFUNDEXCEEDS.
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

	// Record stores the final outcome if the attempt, of kind, is still in
	// progress under fence. ok is false when another owner or reconcile got
	// there first. In the same transaction it settles the payment or refund
	// the attempt made (a refund's reservation becomes refunded, or is given
	// back) and writes o.Event: both, or neither.
	Record(ctx context.Context, kind Kind, scope, key string, fence int64, o Outcome, now time.Time) (ok bool, err error)

	// Release drops the owner's lease, so the client's retry can take over at
	// once. It does nothing if fence no longer owns the attempt.
	Release(ctx context.Context, scope, key string, fence int64, now time.Time) error

	// Stale returns up to limit attempts in progress, last updated at or
	// before updatedBefore, with no live lease at now, oldest first: those
	// Attempt.Stale reports.
	Stale(ctx context.Context, updatedBefore, now time.Time, limit int) ([]Attempt, error)

	// Purge deletes up to limit final attempts last updated before before,
	// never one in progress, and returns how many and how long it held the
	// writing (PurgeStore). Their payments and refunds stay.
	Purge(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)

	// Payment returns the payment with id within scope.
	Payment(ctx context.Context, scope, id string) (*Payment, error)

	// ListPayments returns up to f.Limit+1 payments of f.Scope, newest
	// first: the one past the limit tells the caller there are more.
	ListPayments(ctx context.Context, f PaymentFilter) ([]Payment, error)

	// Refunds returns the refunds of payment id within scope, oldest first.
	Refunds(ctx context.Context, scope, paymentID string) ([]Refund, error)

	// PurgePayments deletes up to limit final payments, with their refunds,
	// last updated before before and whose key's record is gone, never one
	// with a refund in progress, and returns how many and how long it held
	// the writing (PurgeStore).
	PurgePayments(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
}

// PaymentFilter selects a merchant's payments, a page at a time, by key
// (a payment id), never by offset: newest first, StartingAfter the page
// after an id, EndingBefore the page before one.
type PaymentFilter struct {
	Scope         string
	Status        Status // "" for all
	StartingAfter string
	EndingBefore  string
	Limit         int
}

// KeyHash is what a payment or refund keeps of its Idempotency-Key once the
// key's record is purged: enough to know a late retry, not the key itself.
func KeyHash(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
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

// AttemptFilter selects attempts for the admin page, a page at a time by
// key (the time and id of the row at the page's edge), never by offset.
type AttemptFilter struct {
	Status Status // "" for all
	// Search is an Idempotency-Key (whole, of any merchant) or a payment
	// or refund id: each found through an index, however many attempts.
	Search string
	Limit  int
	// Before, if set, asks for the page older than this row; After, the
	// page newer than it (still listed newest first). Filtered by status,
	// the list is by the last change (updated_at), newest first.
	Before, After *AttemptCursor
}

// AttemptCursor is where a page of attempts ends: the list's order is by
// creation time, then id; filtered by status, by the last change's time
// (an index of the status and creation time costs every new payment too
// much, BENCHMARKS.md), then id.
type AttemptCursor struct {
	At time.Time
	ID string
}

// CursorOf is the cursor of attempt a listed under f.
func CursorOf(a Attempt, f AttemptFilter) AttemptCursor {
	if f.Status != "" {
		return AttemptCursor{At: a.UpdatedAt, ID: a.ID}
	}
	return AttemptCursor{At: a.CreatedAt, ID: a.ID}
}

// String is the cursor as a URL carries it: Unix milliseconds, ".", the id.
func (c AttemptCursor) String() string { return strconv.FormatInt(c.At.UnixMilli(), 10) + "." + c.ID }

// ParseAttemptCursor reads a cursor String wrote.
func ParseAttemptCursor(s string) (*AttemptCursor, error) {
	t, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(t, 10, 64)
	if !ok || err != nil || n < 0 || id == "" || !visibleASCII(id) || len(id) > 64 {
		return nil, Invalidf("cursor", "A page cursor is the milliseconds and the id of an attempt, as the page's links give it.")
	}
	return &AttemptCursor{At: time.UnixMilli(n).UTC(), ID: id}, nil
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
	// CountsUpTo counts the attempts in each status, each up to most: the
	// admin page's figures, which read at most that many index entries.
	CountsUpTo(ctx context.Context, most int) (map[Status]int, error)
	// CountStale counts the attempts Store.Stale would return, unlimited.
	CountStale(ctx context.Context, updatedBefore, now time.Time) (int, error)
	// AttemptByPaymentID finds an attempt by payment id in any scope.
	AttemptByPaymentID(ctx context.Context, id string) (*ListedAttempt, error)
	// Payment and Refunds are Store's: what an attempt's payment holds.
	Payment(ctx context.Context, scope, id string) (*Payment, error)
	Refunds(ctx context.Context, scope, paymentID string) ([]Refund, error)
}
