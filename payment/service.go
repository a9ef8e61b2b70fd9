package payment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Result is the answer to a payment request: a status and the exact body.
type Result struct {
	Status   int
	Body     []byte
	Replayed bool // the stored answer of an earlier request with this key
}

// Service runs the claim, charge and record flow.
type Service struct {
	Store    Store
	Provider Provider
	// ProviderName names Provider as the database is bound to it
	// (BindProvider): every attempt records it at its claim.
	ProviderName string
	Log          *slog.Logger
	Now          func() time.Time
	// ProviderTimeout bounds one provider call; past it the outcome is unknown.
	ProviderTimeout time.Duration
	// Lease is how long an owner holds a claim before a retry may take it
	// over. It must outlast ProviderTimeout with margin.
	Lease time.Duration
	// ObserveProviderCall, if set, is told of every provider call: op is
	// "charge" or "lookup", result one of succeeded, declined, found,
	// not_found or unknown.
	ObserveProviderCall func(op, result string, d time.Duration)
	// ObserveQueue, if set, is told what became of every payment offered
	// to the forward queue.
	ObserveQueue func(v QueueVerdict, currency string, amount int64)
	// LinkDown, if set, reports whether the link to the provider is down
	// (the circuit breaker is open): a forward run then stops early.
	LinkDown func() bool
}

// Pay makes the payment req under (scope, key) at most once, whatever the
// number of calls. A final outcome is stored and every later call gets its
// exact bytes; errors carry the code the client sees.
func (s *Service) Pay(ctx context.Context, scope, key string, req Request) (Result, error) {
	canonical := req.Canonical()
	return s.once(ctx, asked(KindPayment, scope, key, canonical), func() Attempt {
		return paymentAttempt(scope, key, req, canonical, s.Now(), s.Lease)
	})
}

// payments is the operation of a payment: one charge.
type payments struct{ s *Service }

func (p payments) move(ctx context.Context, a Attempt) (Outcome, error) {
	var req Request
	if err := json.Unmarshal(a.Request, &req); err != nil { // our own canonical JSON
		return Outcome{}, fmt.Errorf("payment %s: stored request: %w", a.ID, err)
	}
	start := time.Now()
	c, err := p.s.Provider.Charge(ctx, ChargeRequest{
		IdempotencyKey: DownstreamKey(a.Scope, a.Key), PaymentID: a.ID, Amount: req.Amount, Currency: req.Currency,
		Source: req.Source, Description: req.Description,
	})
	if o, final, err := p.s.answered("charge", start, err, func(d *DeclineError) Outcome { return declinedOutcome(a, d) },
		func() Outcome { return p.keyReused(a) }); final || err != nil {
		return o, err
	}
	return p.outcome(a, c), nil
}

func (p payments) find(ctx context.Context, a Attempt) (Outcome, bool, error) {
	start := time.Now()
	c, found, err := p.s.Provider.Lookup(ctx, LookupRequest{IdempotencyKey: DownstreamKey(a.Scope, a.Key), CreatedAt: a.CreatedAt})
	p.s.observe("lookup", callResult(found, err), start)
	if err != nil || !found {
		return Outcome{}, false, err
	}
	return p.outcome(a, c), true, nil
}

// outcome is what the provider's charge c under a's key means: a's payment,
// or, for another amount or currency, another payment's.
func (p payments) outcome(a Attempt, c Charge) Outcome {
	if !c.matches(a) {
		return p.keyReused(a)
	}
	return SucceededOutcome(a, c)
}

func (p payments) keyReused(a Attempt) Outcome {
	p.s.Log.Warn("provider holds this key for another payment", "payment_id", a.ID)
	return providerKeyReusedOutcome(a)
}

func (payments) notCompleted(a Attempt) Outcome { return NotCompletedOutcome(a) }

// unknown names the payment, so the merchant can read it (in progress)
// while the outcome is learned.
func (payments) unknown(a Attempt) error {
	e := Errorf(EOUTCOMEUNKNOWN, "The payment provider's answer was lost; the payment may or may not have been charged. Retry with the same Idempotency-Key to learn the outcome.")
	e.PaymentID = a.ID
	return e
}

// Payment returns the payment with id in scope, with its refunds.
func (s *Service) Payment(ctx context.Context, scope, id string) (View, error) {
	p, err := s.Store.Payment(ctx, scope, id)
	if err != nil {
		return View{}, err
	}
	var rs []Refund
	if p.AmountRefunded+p.AmountReserved > 0 || p.Status == Succeeded {
		if rs, err = s.Store.Refunds(ctx, scope, id); err != nil {
			return View{}, err
		}
	}
	return p.View(rs), nil
}

// DownstreamKey is the idempotency key oncepay gives the provider for
// (scope, key): stable across retries, takeovers and restarts, so the
// provider dedupes on the same identity, and distinct across merchants.
func DownstreamKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "oncepay_" + hex.EncodeToString(h.Sum(nil))[:48]
}

// NewPaymentID returns a fresh public payment id: the time in microseconds,
// then 80 random bits. Ids made in time order land at the end of the id
// index, so a batch of claims dirties one page of it, not one page each.
func NewPaymentID() string { return paymentIDAt(time.Now()) }

// paymentIDAt is a payment id made at t (bench fill makes them in the past).
func paymentIDAt(t time.Time) string {
	return "pay_" + strings.ToUpper(strconv.FormatInt(t.UnixMicro(), 36)) + rand.Text()[:16]
}
