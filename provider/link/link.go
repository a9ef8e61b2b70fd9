// Package link guards the link to a payment provider with a circuit
// breaker (github.com/sony/gobreaker): after a few consecutive calls that
// could not reach the provider, calls fail at once with payment.ErrLinkDown
// instead of each waiting for its timeout, until a probe reaches the
// provider again. A till on a dead link is answered in milliseconds, and
// the forward queue is sent as soon as the link is back.
package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/sony/gobreaker/v2"
)

// Defaults of Config.
const (
	DefaultFailures = 3
	DefaultOpenFor  = 2 * time.Second
)

// Config configures a Link.
type Config struct {
	// Failures is how many consecutive calls that could not reach the
	// provider open the breaker (DefaultFailures).
	Failures int
	// OpenFor is how long the breaker stays open before one probe may pass
	// (DefaultOpenFor); calls in that time are not made.
	OpenFor time.Duration
	// OnUp, if set, is called (on its own goroutine) each time the link
	// comes back: a probe reached the provider.
	OnUp func()
	Log  *slog.Logger
}

// Link is a payment.Provider that calls another through a circuit breaker.
type Link struct {
	p   payment.Provider
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	cfg Config
}

var (
	_ payment.Provider      = (*Link)(nil)
	_ payment.DisputeLooker = (*Link)(nil)
)

// New returns p behind a circuit breaker.
func New(p payment.Provider, cfg Config) (*Link, error) {
	if cfg.Failures < 0 || cfg.OpenFor < 0 {
		return nil, fmt.Errorf("link: failures %d and open-for %s must not be negative", cfg.Failures, cfg.OpenFor)
	}
	cfg.Failures = cmp.Or(cfg.Failures, DefaultFailures)
	cfg.OpenFor = cmp.Or(cfg.OpenFor, DefaultOpenFor)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l := &Link{p: p, cfg: cfg}
	l.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "provider",
		MaxRequests: 1, // half-open: one probe; every other call is refused at once
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(cfg.Failures) },
		IsSuccessful: func(err error) bool {
			// The provider answered, whatever it said.
			_, declined := payment.IsDecline(err)
			return err == nil || declined || errors.Is(err, payment.ErrProviderKeyReused) || errors.Is(err, payment.ErrProviderUnavailable) ||
				errors.Is(err, payment.ErrNoDispute)
		},
		// A caller that gave up (shutdown) says nothing of the link.
		IsExcluded:    func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: l.changed,
	})
	return l, nil
}

// changed is told of every state change, under the breaker's lock: it
// must not call the breaker.
func (l *Link) changed(_ string, from, to gobreaker.State) {
	level := slog.LevelWarn
	if to == gobreaker.StateClosed {
		level = slog.LevelInfo
	}
	l.cfg.Log.Log(context.Background(), level, "provider link "+linkState(to), "from", linkState(from))
	if to == gobreaker.StateClosed && l.cfg.OnUp != nil {
		go l.cfg.OnUp()
	}
}

// linkState names a breaker state as operators read it.
func linkState(s gobreaker.State) string {
	switch s {
	case gobreaker.StateOpen:
		return "down"
	case gobreaker.StateHalfOpen:
		return "probing"
	}
	return "up"
}

// State is the link as operators read it: "up", "down" or "probing".
func (l *Link) State() string { return linkState(l.cb.State()) }

// Down reports whether calls are refused now without being made.
func (l *Link) Down() bool { return l.cb.State() != gobreaker.StateClosed }

// call runs fn through the breaker: not at all, with ErrLinkDown, unless
// the link is up. Only Probe is let through a link that is down: a till's
// payment is never the probe that waits out a dead link's timeout.
func call[T any](l *Link, probe bool, fn func() (T, error)) (T, error) {
	var zero T
	if !probe && l.cb.State() != gobreaker.StateClosed {
		return zero, fmt.Errorf("%w (the circuit breaker is %s)", payment.ErrLinkDown, l.State())
	}
	done, err := l.cb.Allow()
	if err != nil {
		return zero, fmt.Errorf("%w (%v)", payment.ErrLinkDown, err)
	}
	v, err := fn()
	done(err)
	return v, err
}

// Probe asks the provider about a key that names nothing, if the breaker
// lets one call through: the link comes back when it answers.
func (l *Link) Probe(ctx context.Context) error {
	_, err := call(l, true, func() (struct{}, error) {
		_, _, err := l.p.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "oncepay_link_probe", CreatedAt: time.Now()})
		return struct{}{}, err
	})
	return err
}

// Run probes the link every interval while it is down, until ctx ends.
func (l *Link) Run(ctx context.Context, interval time.Duration, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !l.Down() {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		_ = l.Probe(pctx) // the breaker counts it
		cancel()
	}
}

func (l *Link) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	return call(l, false, func() (payment.Charge, error) { return l.p.Charge(ctx, req) })
}

type found[T any] struct {
	v  T
	ok bool
}

func (l *Link) Lookup(ctx context.Context, req payment.LookupRequest) (payment.Charge, bool, error) {
	f, err := call(l, false, func() (found[payment.Charge], error) {
		c, ok, err := l.p.Lookup(ctx, req)
		return found[payment.Charge]{c, ok}, err
	})
	return f.v, f.ok, err
}

func (l *Link) Refund(ctx context.Context, req payment.ProviderRefundRequest) (payment.ProviderRefund, error) {
	return call(l, false, func() (payment.ProviderRefund, error) { return l.p.Refund(ctx, req) })
}

// LookupDispute asks the provider behind the link about a dispute, through
// the breaker, if that provider can be asked (payment.DisputeLooker).
func (l *Link) LookupDispute(ctx context.Context, id string) (payment.ProviderDispute, error) {
	dl, ok := l.p.(payment.DisputeLooker)
	if !ok {
		return payment.ProviderDispute{}, errors.New("link: the provider cannot be asked about disputes")
	}
	return call(l, false, func() (payment.ProviderDispute, error) { return dl.LookupDispute(ctx, id) })
}

func (l *Link) LookupRefund(ctx context.Context, req payment.RefundLookup) (payment.ProviderRefund, bool, error) {
	f, err := call(l, false, func() (found[payment.ProviderRefund], error) {
		r, ok, err := l.p.LookupRefund(ctx, req)
		return found[payment.ProviderRefund]{r, ok}, err
	})
	return f.v, f.ok, err
}
