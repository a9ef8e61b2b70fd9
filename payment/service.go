package payment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
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
	Log      *slog.Logger
	Now      func() time.Time
	// ProviderTimeout bounds one provider call; past it the outcome is unknown.
	ProviderTimeout time.Duration
	// Lease is how long an owner holds a claim before a retry may take it
	// over. It must outlast ProviderTimeout with margin.
	Lease time.Duration
	// ObserveProviderCall, if set, is told of every provider call: op is
	// "charge" or "lookup", result one of succeeded, declined, found,
	// not_found or unknown.
	ObserveProviderCall func(op, result string, d time.Duration)
}

// Pay makes the payment req under (scope, key) at most once, whatever the
// number of calls. A final outcome is stored and every later call gets its
// exact bytes; errors carry the code the client sees.
func (s *Service) Pay(ctx context.Context, scope, key string, req Request) (Result, error) {
	canonical := req.Canonical()
	hash := fingerprint(canonical)
	// A retry finds its answer with a read and never waits for the writer.
	// Only the INSERT below decides who owns a new key.
	cur, err := s.Store.Answer(ctx, scope, key)
	if ErrorCode(err) == ENOTFOUND {
		now := s.Now()
		a := Attempt{
			Scope: scope, Key: key, ID: NewPaymentID(),
			Request: canonical, RequestHash: hash,
			Amount: req.Amount, Currency: req.Currency,
			Status: InProgress, Fence: 1, LeaseExpiresAt: now.Add(s.Lease),
			CreatedAt: now, UpdatedAt: now,
		}
		claimed, cerr := s.Store.Claim(ctx, &a)
		if cerr != nil {
			return Result{}, cerr
		}
		if claimed {
			crashpoint.Hit("after-claim")
			return s.charge(ctx, a, req, false)
		}
		cur, err = s.Store.Answer(ctx, scope, key)
	}
	if err != nil {
		return Result{}, err
	}
	return s.duplicate(ctx, scope, key, cur, hash, req)
}

// duplicate answers a request whose key was already claimed: by the stored
// answer, a conflict, or by taking over an attempt whose owner is gone.
func (s *Service) duplicate(ctx context.Context, scope, key string, ans *Answer, hash []byte, req Request) (Result, error) {
	switch {
	case string(ans.RequestHash) != string(hash):
		return Result{}, Errorf(EKEYREUSED, "This Idempotency-Key was already used with a different request. Use a new key for a new payment.")
	case ans.Status != InProgress:
		return Result{Status: ans.ResponseStatus, Body: ans.ResponseBody, Replayed: true}, nil
	case ans.LeaseExpiresAt.After(s.Now()):
		return Result{}, Errorf(EINPROGRESS, "A request with this Idempotency-Key is still being processed. Retry with the same key.")
	}
	// The owner is gone. A takeover needs the whole attempt; what changed
	// since the read above, the guarded UPDATE sees.
	cur, err := s.Store.Attempt(ctx, scope, key)
	if err != nil {
		return Result{}, err
	}
	now := s.Now()
	fence, ok, err := s.Store.TakeOver(ctx, cur.Scope, cur.Key, cur.Fence, now, now.Add(s.Lease))
	if err != nil {
		return Result{}, err
	}
	if !ok { // another retry or reconcile got there first
		return s.settled(ctx, *cur)
	}
	s.Log.Info("took over abandoned attempt", "payment_id", cur.ID, "fence", fence)
	cur.Fence = fence
	return s.charge(ctx, *cur, req, true)
}

// charge calls the provider as the owner of a under a.Fence and records the
// answer. After a takeover it asks the provider first: the earlier owner may
// have charged.
func (s *Service) charge(ctx context.Context, a Attempt, req Request, lookupFirst bool) (Result, error) {
	dk := DownstreamKey(a.Scope, a.Key)
	// A client that hangs up must not abandon a charge in flight, nor the
	// record of its answer. One deadline covers both provider calls, so the
	// lease (longer than ProviderTimeout) outlasts them.
	ctx = context.WithoutCancel(ctx)
	pctx, cancel := context.WithTimeout(ctx, s.ProviderTimeout)
	defer cancel()
	var (
		c     Charge
		found bool
		err   error
	)
	if lookupFirst {
		c, found, err = s.lookup(pctx, LookupRequest{IdempotencyKey: dk, CreatedAt: a.CreatedAt})
	}
	if err == nil && !found {
		c, err = s.providerCharge(pctx, ChargeRequest{
			IdempotencyKey: dk, PaymentID: a.ID, Amount: req.Amount, Currency: req.Currency,
			Source: req.Source, Description: req.Description,
		})
	}
	d, declined := IsDecline(err)
	var o Outcome
	switch {
	case declined:
		o = declinedOutcome(a, d)
	case errors.Is(err, ErrProviderKeyReused), err == nil && !c.matches(a):
		s.Log.Warn("provider holds this key for another payment", "payment_id", a.ID)
		o = providerKeyReusedOutcome(a)
	case err != nil:
		s.Log.Warn("provider outcome unknown", "payment_id", a.ID, "err", err)
		// Not stored: the retry (same key) takes over at once and asks the provider.
		if rerr := s.Store.Release(ctx, a.Scope, a.Key, a.Fence, s.Now()); rerr != nil {
			s.Log.Error("release lease", "payment_id", a.ID, "err", rerr)
		}
		if errors.Is(err, ErrProviderUnavailable) {
			return Result{}, Errorf(EUNAVAILABLE, "The payment provider cannot be used right now. Retry later with the same Idempotency-Key.")
		}
		return Result{}, Errorf(EOUTCOMEUNKNOWN, "The payment provider's answer was lost; the payment may or may not have been charged. Retry with the same Idempotency-Key to learn the outcome.")
	default:
		o = SucceededOutcome(a, c)
		crashpoint.Hit("after-charge")
	}
	ok, err := s.Store.Record(ctx, a.Scope, a.Key, a.Fence, o, s.Now())
	if err != nil {
		return Result{}, err
	}
	crashpoint.Hit("after-record")
	if !ok { // fenced out: a takeover or reconcile recorded first; theirs stands
		return s.settled(ctx, a)
	}
	return Result{Status: o.ResponseStatus, Body: o.ResponseBody}, nil
}

// lookup asks the provider for the charge under req's key; ctx bounds the call.
func (s *Service) lookup(ctx context.Context, req LookupRequest) (Charge, bool, error) {
	start := time.Now()
	c, found, err := s.Provider.Lookup(ctx, req)
	result := "not_found"
	switch {
	case err != nil:
		result = "unknown"
	case found:
		result = "found"
	}
	s.observe("lookup", result, start)
	return c, found, err
}

// providerCharge asks the provider to charge; ctx bounds the call.
func (s *Service) providerCharge(ctx context.Context, req ChargeRequest) (Charge, error) {
	start := time.Now()
	c, err := s.Provider.Charge(ctx, req)
	result := "succeeded"
	if _, declined := IsDecline(err); declined {
		result = "declined"
	} else if err != nil {
		result = "unknown"
	}
	s.observe("charge", result, start)
	return c, err
}

func (s *Service) observe(op, result string, start time.Time) {
	if s.ObserveProviderCall != nil {
		s.ObserveProviderCall(op, result, time.Since(start))
	}
}

// settled answers from whatever the store holds now, for a caller that lost
// a race for ownership.
func (s *Service) settled(ctx context.Context, a Attempt) (Result, error) {
	cur, err := s.Store.Answer(ctx, a.Scope, a.Key)
	if err != nil {
		return Result{}, err
	}
	if cur.Status == InProgress {
		return Result{}, Errorf(EINPROGRESS, "A request with this Idempotency-Key is still being processed. Retry with the same key.")
	}
	return Result{Status: cur.ResponseStatus, Body: cur.ResponseBody, Replayed: true}, nil
}

// Payment returns the payment with id in scope.
func (s *Service) Payment(ctx context.Context, scope, id string) (View, error) {
	a, err := s.Store.AttemptByID(ctx, scope, id)
	if err != nil {
		return View{}, err
	}
	return a.View(), nil
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
func NewPaymentID() string {
	return "pay_" + strings.ToUpper(strconv.FormatInt(time.Now().UnixMicro(), 36)) + rand.Text()[:16]
}
