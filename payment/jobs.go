package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of the maintenance jobs, as docs/configuration.md documents them.
const (
	DefaultStaleAfter     = 5 * time.Minute
	DefaultReconcileLimit = 1000
	DefaultPurgeBatchSize = 1000
	// DefaultPurgeBatchTime is how long one purge batch may hold the writer
	// before the next is made smaller: on SQLite, with the batches' third
	// of the writer (groupcommit.DefaultAloneShare), 10 ms kept new
	// payments' p99 within 1.62x beside a purge of a file of 10 million
	// payments; 25 ms, with a quarter or a half, let it reach 1.81-3.16x
	// (BENCHMARKS.md, "A share of the writer").
	DefaultPurgeBatchTime = 10 * time.Millisecond
	// minPurgeBatch is the smallest batch a bound by time makes: a commit
	// alone (its sync, a checkpoint) may hold a busy writer 10-40 ms, so a
	// batch of a few rows takes as long as one of this size, and halving
	// below it only makes more of them (BENCHMARKS.md).
	minPurgeBatch = 64
	// DefaultEventRetention is how long a final provider event stays in the
	// inbox: past Stripe's redelivery window (up to 3 days), so a late
	// redelivery is answered as a duplicate, with days to spare for an
	// operator to read it.
	DefaultEventRetention = 7 * 24 * time.Hour
)

// Reconciler settles attempts left in progress: their owner died, or its
// answer was lost and the client never retried. The provider is the source
// of truth; nothing is guessed. Build it with NewReconciler.
type Reconciler struct {
	Service *Service
	// StaleAfter is how old an in-progress attempt must be before reconcile
	// touches it. Far longer than a provider call, so a request whose call
	// timed out on our side has surely landed or died at the provider.
	StaleAfter time.Duration
	// Limit caps the attempts one run settles; the next run takes the rest.
	Limit int
	// Observe, if set, is told what every run and every ReconcileOne did.
	Observe func(ReconcileResult)
}

// NewReconciler returns r with its defaults set (StaleAfter 5m, Limit
// 1000) and its configuration checked, as river's maintenance services do:
// a zero Limit would make every run settle nothing, silently.
func NewReconciler(r Reconciler) (*Reconciler, error) {
	if r.Service == nil {
		return nil, errors.New("payment: reconciler: no Service")
	}
	if r.StaleAfter < 0 {
		return nil, fmt.Errorf("payment: reconciler: StaleAfter %s is negative", r.StaleAfter)
	}
	if r.Limit < 0 {
		return nil, fmt.Errorf("payment: reconciler: Limit %d is negative", r.Limit)
	}
	r.StaleAfter = cmp.Or(r.StaleAfter, DefaultStaleAfter)
	r.Limit = cmp.Or(r.Limit, DefaultReconcileLimit)
	return &r, nil
}

// ReconcileResult is what one run did.
type ReconcileResult struct {
	Checked   int // stale attempts found
	Succeeded int // the provider had charged: recorded as succeeded
	Failed    int // the provider had not: recorded as not completed
	Unknown   int // the provider could not say: left for the next run
	Skipped   int // a retry settled or took it over first
}

func (r ReconcileResult) String() string {
	return fmt.Sprintf("reconcile: %d stale, %d succeeded, %d failed (not completed), %d still unknown, %d skipped",
		r.Checked, r.Succeeded, r.Failed, r.Unknown, r.Skipped)
}

// RunOnce settles the stale attempts there are now.
func (r *Reconciler) RunOnce(ctx context.Context) (res ReconcileResult, err error) {
	if r.Limit < 1 {
		return res, errors.New("payment: reconciler: Limit is not set; build it with NewReconciler")
	}
	defer func() { r.observe(res) }()
	now := r.Service.Now()
	stale, err := r.Service.Store.Stale(ctx, now.Add(-r.StaleAfter), now, r.Limit)
	if err != nil {
		return res, err
	}
	for _, a := range stale {
		res.Checked++
		st, err := r.settle(ctx, a)
		if err != nil {
			return res, err
		}
		res.count(st)
	}
	return res, nil
}

// ReconcileOne settles one attempt now if it is stale (Attempt.Stale): what
// the admin page's button does. It
// returns the attempt as it stands afterwards.
func (r *Reconciler) ReconcileOne(ctx context.Context, scope, key string) (*Attempt, error) {
	a, err := r.Service.Store.Attempt(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	now := r.Service.Now()
	if !a.Stale(now, r.StaleAfter) {
		return nil, Errorf(EINVALID, "Only an attempt in progress, untouched for %s and with no live lease, can be reconciled.", r.StaleAfter)
	}
	st, err := r.settle(ctx, *a)
	if err != nil {
		return nil, err
	}
	res := ReconcileResult{Checked: 1}
	res.count(st)
	r.observe(res)
	return r.Service.Store.Attempt(ctx, scope, key)
}

func (r *Reconciler) observe(res ReconcileResult) {
	if r.Observe != nil {
		r.Observe(res)
	}
}

// count adds the status an attempt was left in.
func (res *ReconcileResult) count(st Status) {
	switch st {
	case Succeeded:
		res.Succeeded++
	case Failed:
		res.Failed++
	case InProgress:
		res.Unknown++
	default:
		res.Skipped++
	}
}

// settle settles one stale attempt, whatever its kind (Service.settle).
func (r *Reconciler) settle(ctx context.Context, a Attempt) (Status, error) {
	return r.Service.settle(ctx, a)
}

// PurgeStore is what the Purger deletes from: the keys' records, the
// payments past their own retention, and the inbox's final events. Each
// method deletes one batch and returns how many rows it deleted and how
// long the batch held the database's writing (its transaction, on SQLite
// the one writer), not counting the wait for its turn: the Purger sizes
// the next batch by it.
type PurgeStore interface {
	Purge(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
	PurgePayments(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
	// PurgeEvents deletes up to limit final events (processed, ignored) last
	// updated before before, never one still to be applied.
	PurgeEvents(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
	// PurgeOutbox deletes up to limit of the events told to merchants made
	// before before (OutboxStore).
	PurgeOutbox(ctx context.Context, before time.Time, limit int) (int, time.Duration, error)
}

// Purger deletes final attempts older than the retention, in batches, so
// the table stays small and no transaction holds the writer for long; and
// so the payments past their retention and the inbox's final events.
// Build it with NewPurger.
type Purger struct {
	Store     PurgeStore
	Now       func() time.Time
	Retention time.Duration
	// PaymentRetention is how long a payment and its refunds are kept after
	// the last change, and the events told to merchants after they were
	// made; 0 keeps them. It must be at least Retention.
	PaymentRetention time.Duration
	// EventRetention is how long a final provider event is kept after it
	// became final; 0 is DefaultEventRetention. A redelivery of an event
	// purged is applied again, which changes nothing: applying goes through
	// the fenced record, and a final answer is never changed.
	EventRetention time.Duration
	BatchSize      int
	// BatchTime bounds how long one batch holds the writer (as the store
	// measures it, without the wait for its turn): the first batch is 64
	// rows (minPurgeBatch), one that held it under half of BatchTime
	// doubles the next one's size, up to BatchSize, one that held it longer
	// halves it, down to 64, and a run starts at the size the last one
	// ended with. Default DefaultPurgeBatchTime; negative: every batch
	// BatchSize.
	BatchTime time.Duration
	// Observe, if set, is told what every run did.
	Observe func(PurgeResult)
	// sizes are the batch sizes the last run ended with, of each thing it
	// purges (attempts, events, payments, the outbox), where the next run
	// starts. RunOnce never runs beside itself: cron skips a run due while
	// one is still going.
	sizes [4]int
}

// NewPurger returns p with its defaults set (Now time.Now, BatchSize 1000,
// EventRetention 7 days) and its configuration checked: a zero BatchSize
// would delete nothing in a loop that never ends, and a retention of zero
// would forget every key at once.
func NewPurger(p Purger) (*Purger, error) {
	if p.Store == nil {
		return nil, errors.New("payment: purger: no Store")
	}
	if p.EventRetention < 0 {
		return nil, fmt.Errorf("payment: purger: EventRetention %s is negative", p.EventRetention)
	}
	if p.Retention <= 0 {
		return nil, fmt.Errorf("payment: purger: Retention %s must be positive", p.Retention)
	}
	if p.BatchSize < 0 {
		return nil, fmt.Errorf("payment: purger: BatchSize %d is negative", p.BatchSize)
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	p.BatchSize = cmp.Or(p.BatchSize, DefaultPurgeBatchSize)
	p.BatchTime = cmp.Or(p.BatchTime, DefaultPurgeBatchTime)
	p.EventRetention = cmp.Or(p.EventRetention, DefaultEventRetention)
	return &p, nil
}

// PurgeResult is what one run did.
type PurgeResult struct {
	Deleted         int
	PaymentsDeleted int       // payments (with their refunds) past the payment retention
	OutboxDeleted   int       // events told to merchants, past the payment retention
	EventsDeleted   int       // final provider events past the event retention
	Before          time.Time // attempts final before this were deleted
	// LongestBatch is the longest one batch held the writer (the store's
	// measure), and Batches how many ran.
	LongestBatch time.Duration
	Batches      int
}

func (r PurgeResult) String() string {
	s := fmt.Sprintf("purge: deleted %d final attempts last updated before %s", r.Deleted, r.Before.UTC().Format(time.RFC3339))
	if r.EventsDeleted > 0 {
		s += fmt.Sprintf(", %d final webhook events past the event retention", r.EventsDeleted)
	}
	switch {
	case r.PaymentsDeleted > 0 && r.OutboxDeleted > 0:
		s += fmt.Sprintf(", and %d payments and %d merchant events past the payment retention", r.PaymentsDeleted, r.OutboxDeleted)
	case r.PaymentsDeleted > 0:
		s += fmt.Sprintf(", and %d payments past the payment retention", r.PaymentsDeleted)
	case r.OutboxDeleted > 0:
		s += fmt.Sprintf(", and %d merchant events past the payment retention", r.OutboxDeleted)
	}
	if r.Batches > 1 {
		s += fmt.Sprintf(" (%d batches, the longest %s)", r.Batches, r.LongestBatch.Round(time.Millisecond/10))
	}
	return s
}

// RunOnce deletes every final attempt older than the retention, then every
// final event older than the event retention, then (if they are not kept)
// the payments older than the payment retention and the merchants' events
// made before it, each batch by batch until a batch comes back short.
func (p *Purger) RunOnce(ctx context.Context) (res PurgeResult, err error) {
	if p.BatchSize < 1 || p.Now == nil {
		return res, errors.New("payment: purger: BatchSize or Now is not set; build it with NewPurger")
	}
	res.Before = p.Now().Add(-p.Retention)
	defer func() {
		if p.Observe != nil {
			p.Observe(res)
		}
	}()
	if p.PaymentRetention != 0 && p.PaymentRetention < p.Retention {
		return res, fmt.Errorf("purge: the payment retention (%s) must be 0 (kept) or at least the key retention (%s)", p.PaymentRetention, p.Retention)
	}
	if p.EventRetention < 0 {
		return res, fmt.Errorf("purge: the event retention (%s) is negative", p.EventRetention)
	}
	n, err := p.batches(ctx, &res, 0, p.Store.Purge, res.Before)
	res.Deleted = n
	if err != nil {
		return res, err
	}
	eventRetention := cmp.Or(p.EventRetention, DefaultEventRetention) // built by hand: never zero
	n, err = p.batches(ctx, &res, 1, p.Store.PurgeEvents, p.Now().Add(-eventRetention))
	res.EventsDeleted = n
	if err != nil || p.PaymentRetention <= 0 {
		return res, err
	}
	res.PaymentsDeleted, err = p.batches(ctx, &res, 2, p.Store.PurgePayments, p.Now().Add(-p.PaymentRetention))
	if err != nil {
		return res, err
	}
	res.OutboxDeleted, err = p.batches(ctx, &res, 3, p.Store.PurgeOutbox, p.Now().Add(-p.PaymentRetention))
	return res, err
}

// batches deletes batch by batch until a batch comes back short (river's
// JobCleaner), so no transaction holds the writer for long: each batch
// at most BatchSize rows, and its size halved after one that held the
// writer past BatchTime (a large file, a slow disk, a busy machine). The
// store tells how long a batch held it: a time taken around the call would
// count the wait behind the payments' own writes, and under load shrink
// the batches to a few rows while they hold the writer for next to nothing.
// Bounded by time, the first batch is minPurgeBatch rows and each quick
// one doubles the next: a first batch of BatchSize rows would hold the
// writer as long as an unbounded one (a second on a large file) before the
// bound knew. Each run of kind (an index of sizes) starts where the last
// ended, so a run every second does not climb from the floor each time.
func (p *Purger) batches(ctx context.Context, res *PurgeResult, kind int, purge func(context.Context, time.Time, int) (int, time.Duration, error), before time.Time) (int, error) {
	total, size := 0, p.BatchSize
	floor := min(p.BatchSize, minPurgeBatch)
	if p.BatchTime > 0 {
		size = max(floor, min(p.BatchSize, p.sizes[kind]))
	}
	for {
		n, held, err := purge(ctx, before, size)
		total += n
		res.Batches++
		res.LongestBatch = max(res.LongestBatch, held)
		if err != nil || n < size {
			p.sizes[kind] = size
			return total, err
		}
		switch {
		case p.BatchTime <= 0:
		case held > p.BatchTime:
			size = max(floor, size/2)
		case held < p.BatchTime/2:
			size = min(p.BatchSize, 2*size)
		}
	}
}
