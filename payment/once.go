package payment

import (
	"context"
	"errors"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
)

// operation is one kind of money movement under a client's key: the part of
// the flow that talks to the provider and builds answers. The flow itself
// (claim, lease, fenced record, replay, takeover, reconcile) is written once,
// in this file, for every kind; payments.go and refunds.go are its users.
type operation interface {
	// move asks the provider to move a's money under a's downstream key. An
	// error is an unknown outcome (or ErrProviderUnavailable); every
	// definitive answer, a refusal included, is an Outcome.
	move(ctx context.Context, a Attempt) (Outcome, error)
	// find asks the provider what became of a. found is false only when the
	// provider has surely not moved a's money; an error means it cannot say.
	find(ctx context.Context, a Attempt) (o Outcome, found bool, err error)
	// notCompleted is what reconcile records when the provider never moved
	// a's money: final, so the key is spent.
	notCompleted(a Attempt) Outcome
	// unknown is the client's error when the provider's answer was lost.
	unknown(a Attempt) error
}

// operation returns the operation of kind k.
func (s *Service) operation(k Kind) operation {
	if k == KindRefund {
		return refunds{s}
	}
	return payments{s}
}

// asked is what a duplicate is decided by: the kind, the key and the
// request's fingerprint. The rest of an attempt (its id, its details) is
// made only to be claimed, so that a replay, or a retry storm's 409, costs
// no more than it must.
func asked(kind Kind, scope, key string, canonical []byte) Attempt {
	return Attempt{Kind: kind, Scope: scope, Key: key, RequestHash: fingerprint(canonical)}
}

// once runs the operation a asks for at most once under (a.Scope, a.Key),
// whatever the number of calls: a is what was asked (asked), and attempt
// makes the attempt a new claim inserts. A final outcome is stored and
// every later call gets its exact bytes.
func (s *Service) once(ctx context.Context, a Attempt, attempt func() Attempt) (Result, error) {
	// A retry finds its answer with a read and never waits for the writer.
	ans, err := s.Store.Answer(ctx, a.Scope, a.Key)
	switch {
	case err == nil:
		return s.duplicate(ctx, a, ans)
	case ErrorCode(err) == ENOTFOUND:
		return s.claim(ctx, attempt())
	}
	return Result{}, err
}

// claim claims the key a read found free. Only the INSERT of Claim decides
// who owns a new key: the loser is a duplicate after all. (Its own function
// so that only a claim puts a on the heap, not every replay.)
func (s *Service) claim(ctx context.Context, a Attempt) (Result, error) {
	a.Provider = s.ProviderName
	claimed, err := s.Store.Claim(ctx, &a)
	if err != nil {
		return Result{}, err
	}
	if claimed {
		crashpoint.Hit("after-claim")
		return s.own(ctx, a, false)
	}
	ans, err := s.Store.Answer(ctx, a.Scope, a.Key)
	if err != nil {
		return Result{}, err
	}
	return s.duplicate(ctx, a, ans)
}

// duplicate answers req, a request whose key was already claimed, from ans,
// what the key holds: by the stored answer, a conflict, or by taking over an
// attempt whose owner is gone.
func (s *Service) duplicate(ctx context.Context, req Attempt, ans *Answer) (Result, error) {
	switch {
	case string(ans.RequestHash) != string(req.RequestHash):
		return Result{}, Errorf(EKEYREUSED, "This Idempotency-Key was already used with a different request. Use a new key for a new %s.", req.Kind)
	case ans.Status != InProgress:
		return Result{Status: ans.ResponseStatus, Body: ans.ResponseBody, Replayed: true}, nil
	case ans.LeaseExpiresAt.After(s.Now()):
		return Result{}, Errorf(EINPROGRESS, "A request with this Idempotency-Key is still being processed. Retry with the same key.")
	}
	// The owner is gone. A takeover needs the whole attempt; what changed
	// since the read above, the guarded UPDATE sees.
	cur, err := s.Store.Attempt(ctx, req.Scope, req.Key)
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
	s.Log.Info("took over abandoned attempt", "kind", cur.Kind, "id", cur.ID, "fence", fence)
	cur.Fence, cur.LeaseExpiresAt = fence, now.Add(s.Lease)
	return s.own(ctx, *cur, true)
}

// own calls the provider as the owner of a under a.Fence and records the
// answer. After a takeover it asks the provider first: the earlier owner may
// have moved the money.
func (s *Service) own(ctx context.Context, a Attempt, lookupFirst bool) (Result, error) {
	op := s.operation(a.Kind)
	// A client that hangs up must not abandon a call in flight, nor the
	// record of its answer. One deadline covers both provider calls, and it
	// ends with the lease: past the lease a retry may take the attempt over
	// and reconcile may settle it, so an owner paused between its claim and
	// its call (a stalled process) must not call the provider at all.
	ctx = context.WithoutCancel(ctx)
	budget := min(s.ProviderTimeout, a.LeaseExpiresAt.Sub(s.Now()))
	pctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var (
		o     Outcome
		found bool
		err   error
	)
	switch {
	case budget <= 0:
		err = errLeaseRanOut
	case lookupFirst:
		o, found, err = op.find(pctx, a)
	}
	if err == nil && !found {
		o, err = op.move(pctx, a)
	}
	if err != nil {
		s.Log.Warn("provider outcome unknown", "kind", a.Kind, "id", a.ID, "err", err)
		if a.Kind == KindPayment && unreachable(err) {
			// A call that was made may have reached the provider; so may
			// the earlier owner's, after a takeover.
			if res, ok := s.queue(ctx, a, lookupFirst || !errors.Is(err, ErrLinkDown)); ok {
				return res, nil
			}
		}
		// Not stored: the retry (same key) takes over at once and asks the provider.
		if rerr := s.Store.Release(ctx, a.Scope, a.Key, a.Fence, s.Now()); rerr != nil {
			s.Log.Error("release lease", "kind", a.Kind, "id", a.ID, "err", rerr)
		}
		if errors.Is(err, ErrProviderUnavailable) {
			return Result{}, Errorf(EUNAVAILABLE, "The payment provider cannot be used right now. Retry later with the same Idempotency-Key.")
		}
		return Result{}, op.unknown(a)
	}
	if o.Status == Succeeded {
		crashpoint.Hit("after-" + movedPoint[a.Kind])
	}
	ok, err := s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence, s.withEvent(a, o), s.Now())
	if err != nil {
		return Result{}, err
	}
	crashpoint.Hit("after-record")
	if !ok { // fenced out: a takeover or reconcile recorded first; theirs stands
		return s.settled(ctx, a)
	}
	return Result{Status: o.ResponseStatus, Body: o.ResponseBody}, nil
}

// unreachable reports whether err says the provider could not be reached
// or could not answer (the link, a timeout, its 5xx): what a payment may be
// queued for. Not a refusal of oncepay's credentials, nor a lease that ran
// out before any call.
func unreachable(err error) bool {
	return !errors.Is(err, ErrProviderUnavailable) && !errors.Is(err, errLeaseRanOut)
}

// errLeaseRanOut: the owner's lease ended before it asked the provider
// anything, so it asks nothing; the retry takes over and asks.
var errLeaseRanOut = errors.New("the lease ran out before the provider was called")

// movedPoint names the crash point between the provider moving money and
// the record of it: after-charge, after-refund.
var movedPoint = map[Kind]string{KindPayment: "charge", KindRefund: "refund"}

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

// settle is reconcile's takeover of a stale attempt: it asks the provider
// and records what it says; a provider with nothing under a's key never
// moved its money, and the attempt is recorded as not completed. It
// returns the status it left: "" if it could not take a over, InProgress
// if the provider could not say.
func (s *Service) settle(ctx context.Context, a Attempt) (Status, error) {
	o, lookupErr, err := s.confirm(ctx, a, func(a Attempt) (Outcome, bool) { return s.operation(a.Kind).notCompleted(a), true })
	switch {
	case err != nil:
		return "", err
	case lookupErr != nil:
		s.Log.Warn("reconcile: provider lookup failed; left for the next run", "kind", a.Kind, "id", a.ID, "err", lookupErr)
	case o.Status != "":
		s.Log.Info("reconcile: settled", "kind", a.Kind, "id", a.ID, "status", o.Status, "provider_id", o.ChargeID)
	}
	return o.Status, nil
}

// confirm takes a over, asks the provider by a's downstream key what became
// of it, and records the provider's answer: the one way reconcile and a
// provider's event settle an attempt. absent says what the provider holding
// nothing under the key means: an outcome to record, or false to record
// nothing. confirm returns what it recorded: status "" if a request or
// reconcile took a over or recorded first; InProgress if it recorded
// nothing (the lookup failed, lookupErr, or absent declined), a's lease
// then released with a as stale as it was.
func (s *Service) confirm(ctx context.Context, a Attempt, absent func(Attempt) (Outcome, bool)) (o Outcome, lookupErr, err error) {
	now := s.Now()
	fence, ok, err := s.Store.TakeOver(ctx, a.Scope, a.Key, a.Fence, now, now.Add(s.Lease))
	if err != nil || !ok {
		return Outcome{}, nil, err
	}
	a.Fence = fence
	pctx, cancel := context.WithTimeout(ctx, s.ProviderTimeout)
	o, found, lookupErr := s.operation(a.Kind).find(pctx, a)
	cancel()
	if lookupErr == nil && !found {
		o, found = absent(a)
	}
	if !found {
		// No money moved here: the attempt keeps its old update time, so it
		// is as stale as before and reconcile's next run asks again.
		return Outcome{Status: InProgress}, lookupErr, s.Store.Release(ctx, a.Scope, a.Key, a.Fence, a.UpdatedAt)
	}
	ok, err = s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence, s.withEvent(a, o), s.Now())
	if err != nil || !ok {
		return Outcome{}, nil, err
	}
	return o, nil, nil
}

// observe tells ObserveProviderCall of one call: op is "charge", "lookup",
// "refund" or "refund_lookup".
func (s *Service) observe(op, result string, start time.Time) {
	if s.ObserveProviderCall != nil {
		s.ObserveProviderCall(op, result, time.Since(start))
	}
}

// answered reports a call that asked the provider to move money, begun at
// start, and sorts its error: a decline or a key the provider holds for
// another request is a final outcome (final true); any other error is an
// unknown outcome, returned as it is. With neither, the call succeeded.
func (s *Service) answered(call string, start time.Time, err error, declined func(*DeclineError) Outcome, reused func() Outcome) (o Outcome, final bool, _ error) {
	result := "succeeded"
	if err != nil {
		result = callResult(false, err)
	}
	s.observe(call, result, start)
	if d, ok := IsDecline(err); ok {
		return declined(d), true, nil
	}
	if errors.Is(err, ErrProviderKeyReused) {
		return reused(), true, nil
	}
	return Outcome{}, false, err
}

// callResult names a provider call's result for ObserveProviderCall.
func callResult(found bool, err error) string {
	switch _, declined := IsDecline(err); {
	case declined:
		return "declined"
	case err != nil:
		return "unknown"
	case found:
		return "found"
	}
	return "not_found"
}
