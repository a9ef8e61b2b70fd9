package payment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix marks oncepay API key secrets, so a leaked one is recognisable.
const SecretPrefix = "opk_"

// NewMerchant returns a new merchant named name, with a fresh id.
func NewMerchant(name string, now time.Time) Merchant {
	return Merchant{ID: newID("mer_"), Name: name, CreatedAt: now.UTC().Truncate(time.Millisecond)}
}

// NewAPIKey returns a new key of the merchant merchantID and its secret,
// which no store keeps: only HashSecret(secret) is stored.
func NewAPIKey(merchantID, name string, now time.Time) (APIKey, string) {
	k := APIKey{ID: newID("key_"), MerchantID: merchantID, Name: name, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	return k, SecretPrefix + rand.Text() + rand.Text() // 260 random bits
}

// HashSecret is what a store keeps of a secret. The secret is 256 random
// bits, so a fast hash cannot be brute-forced.
func HashSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// LooksLikeSecret reports whether secret can be an oncepay secret at all, so
// a store is not asked about what cannot be one.
func LooksLikeSecret(secret string) bool { return strings.HasPrefix(secret, SecretPrefix) }

// Errors every store returns alike.
var (
	errUnauthorized = Errorf(EUNAUTHORIZED, "Unknown or revoked API key.")
	errNoAttempt    = Errorf(ENOTFOUND, "No such attempt.")
	errNoPayment    = Errorf(ENOTFOUND, "No such payment.")
)

// ErrUnauthorized is the answer to an unknown or revoked API key.
func ErrUnauthorized() error { return errUnauthorized }

// ErrNoPayment is the answer to a payment (or key) not in the store.
func ErrNoPayment() error { return errNoPayment }

// ErrNoAttempt is the admin page's answer to an unknown payment id.
func ErrNoAttempt() error { return errNoAttempt }

// ErrNoMerchant is the answer to a key made for an unknown merchant.
func ErrNoMerchant(id string) error { return Errorf(ENOTFOUND, "No merchant %q.", id) }

// ErrNoLiveKey is the answer to revoking a key that is unknown or revoked.
func ErrNoLiveKey(id string) error { return Errorf(ENOTFOUND, "No live API key %q.", id) }

// ProviderBound is BindProvider's refusal: the database's payments went to
// bound, and inProgress are still in progress there, so provider, which
// cannot know about them, must not settle them.
func ProviderBound(bound, provider string, inProgress int) error {
	return fmt.Errorf("this database's payments went to provider %q, and %d are still in progress or queued offline: refusing %q, which cannot know about them (pass --provider %s)",
		bound, inProgress, provider, bound)
}

// newID returns prefix and 80 random bits in lower-case base32.
func newID(prefix string) string { return prefix + strings.ToLower(rand.Text()[:16]) }

// AccountStore manages merchants and their API keys: what the merchant and
// apikey commands do.
type AccountStore interface {
	KeyStore
	CreateMerchant(ctx context.Context, name string, now time.Time) (Merchant, error)
	// Merchants lists every merchant with its number of live keys, oldest first.
	Merchants(ctx context.Context) ([]Merchant, error)
	// CreateAPIKey makes a key of merchantID and returns it with its secret,
	// shown once. An unknown merchant is an ENOTFOUND error.
	CreateAPIKey(ctx context.Context, merchantID, name string, now time.Time) (APIKey, string, error)
	// APIKeys lists every key, revoked ones included, oldest first.
	APIKeys(ctx context.Context) ([]APIKey, error)
	// RevokeAPIKey revokes a live key; anything else is ENOTFOUND.
	RevokeAPIKey(ctx context.Context, id string, now time.Time) error
}

// Database is one whole oncepay database, whichever engine keeps it: what
// every command needs from it. sqlitestore and pgstore implement it.
type Database interface {
	Store
	AdminStore
	AccountStore
	EventStore
	PurgeStore
	EndpointStore
	// BindProvider records which provider the payments go to, and refuses
	// another while any attempt is in progress (see ProviderBound).
	BindProvider(ctx context.Context, provider string) error
	// InProgress counts the attempts in progress and returns the creation
	// time of the oldest (zero if none), for the metrics.
	InProgress(ctx context.Context) (n int, oldest time.Time, err error)
	Close() error
}

// StoredAPIKey is an API key as a store keeps it, hash included: what
// "oncepay copy" moves.
type StoredAPIKey struct {
	APIKey
	SecretHash []byte
}

// StoredRefund is a refund as a store keeps it, its key's hash included.
type StoredRefund struct {
	Refund
	KeyHash []byte
}

// Snapshot is a whole database at one moment: every attempt (in progress
// ones with their fence and lease), payment (with its refunds' amounts
// reserved), refund, inbox event, merchant, API key and setting, and the
// merchants' events, endpoints and deliveries (pending ones with their
// fence, lease and next try).
type Snapshot struct {
	Attempts   []Attempt
	Payments   []Payment
	Refunds    []StoredRefund
	Events     []InboxEvent
	Merchants  []Merchant
	APIKeys    []StoredAPIKey
	Settings   map[string]string
	Outbox     []OutboxEvent
	Endpoints  []Endpoint
	Deliveries []OutboxDelivery
}

// ExpiredKey is a store's refusal of a's claim when a.Key's record was
// purged but what it made is kept: kind "payment" or "refund", its id, and
// the payment it belongs to. Nothing was sent to the provider.
func ExpiredKey(a *Attempt, kind, id, paymentID string) error {
	e := &Error{Code: EKEYEXPIRED, PaymentID: paymentID,
		Message: "This Idempotency-Key was used for payment " + paymentID + ", and its record (the stored request and answer) was purged after the retention. Nothing was sent to the provider. Read the payment with GET /v1/payments/" + paymentID + "; use a new key for a new " + string(a.Kind) + "."}
	if kind == "refund" {
		e.RefundID = id
		e.Message = "This Idempotency-Key was used for refund " + id + " of payment " + paymentID + ", and its record was purged after the retention. Nothing was sent to the provider. Read it with GET /v1/payments/" + paymentID + "/refunds; use a new key for a new " + string(a.Kind) + "."
	}
	return e
}

// RefundRefused says why a store's guarded reservation of refund a matched
// nothing, given its payment p as read after it (nil: no such payment).
func RefundRefused(a *Attempt, p *Payment) error {
	switch {
	case p == nil:
		return &Error{Code: ENOTFOUND, Message: "No such payment."}
	case p.Status != Succeeded:
		return &Error{Code: ENOTREFUNDABLE, PaymentID: a.PaymentID,
			Message: "Only a succeeded payment can be refunded; this one is " + string(p.Status) + ". Nothing was sent to the provider."}
	}
	msg := "The payment has " + strconv.FormatInt(p.Refundable(), 10) + " left to refund"
	if p.AmountReserved > 0 {
		msg += " (" + strconv.FormatInt(p.AmountReserved, 10) + " more is held by refunds in progress)"
	}
	return &Error{Code: EREFUNDEXCEEDS, PaymentID: a.PaymentID,
		Message: msg + "; this refund asks for more. Nothing was sent to the provider."}
}
