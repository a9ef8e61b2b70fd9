package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// runBenchFill is "oncepay bench fill": a large, realistic database, made
// quickly, to measure how cost grows with data. It makes the merchants and
// their API keys through the store, then appends the rows payment.Fill makes
// in batches, one transaction each, and prints "merchant_id api_key" per
// merchant so anyone can load the filled database with real requests.
func runBenchFill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		cfg                          config
		payments, live, unpurged, nm int
		batch                        int
		span, retention              time.Duration
		provider                     string
	)
	fs := newFlagSet("bench fill", "bench fill --db FILE|URL --payments N --live-keys N --merchants N", stderr)
	cfg.registerStore(fs)
	fs.IntVar(&payments, "payments", 100000, "payments to make, each with its event; one in 10 that succeeded also refunded in part")
	fs.IntVar(&live, "live-keys", 10000, "of them, the newest made within the retention: their keys' records are kept and replay")
	fs.IntVar(&unpurged, "unpurged", 0, "of them, the next newest past the retention whose keys' records the purge has not deleted yet")
	fs.IntVar(&nm, "merchants", 10, "merchants the payments are spread over, each with one API key")
	fs.DurationVar(&span, "span", 2*365*24*time.Hour, "how far back the oldest payment was made")
	fs.DurationVar(&retention, "retention", 24*time.Hour, "the retention of keys' records (serve's --retention)")
	fs.StringVar(&provider, "fill-provider", "sim", "the provider the payments went through, as the database is bound to it")
	fs.IntVar(&batch, "batch", 5000, "payments a transaction appends")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	switch {
	case payments < 0 || live < 0 || unpurged < 0 || live+unpurged > payments:
		return errors.New("bench fill: --live-keys plus --unpurged must be at most --payments, none negative")
	case nm < 1 || batch < 1:
		return errors.New("bench fill: --merchants and --batch must be at least 1")
	case span <= retention+3*time.Hour || retention <= 0:
		return errors.New("bench fill: --span must be more than --retention plus 3h, and --retention positive")
	}
	cfg.bulkLoad = true
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	f, ok := db.(payment.Filler)
	if !ok {
		return fmt.Errorf("bench fill: %s cannot be filled", cfg.dbName())
	}
	if err := db.BindProvider(ctx, provider); err != nil {
		return err
	}
	now := time.Now().UTC()
	fill := &payment.Fill{Now: now, Payments: payments, LiveKeys: live, Unpurged: unpurged,
		Retention: retention, Span: span, Provider: provider}
	for i := range nm {
		m, err := db.CreateMerchant(ctx, fmt.Sprintf("Fill merchant %d", i), now.Add(-span))
		if err != nil {
			return err
		}
		_, secret, err := db.CreateAPIKey(ctx, m.ID, "bench fill", now.Add(-span))
		if err != nil {
			return err
		}
		fill.Merchants = append(fill.Merchants, m.ID)
		fmt.Fprintf(stdout, "%s %s\n", m.ID, secret)
	}
	start := time.Now()
	err = fillBatches(ctx, payments, batch, fill.Batch, func(s *payment.Snapshot, done int) error {
		if err := f.Fill(ctx, s); err != nil {
			return err
		}
		if done%(batch*100) == 0 || done == payments {
			el := time.Since(start)
			fmt.Fprintf(stderr, "bench fill: %d of %d payments in %s (%.0f/s)\n", done, payments, el.Round(time.Second), float64(done)/el.Seconds())
		}
		return nil
	})
	if err == nil {
		t := time.Now()
		if err = f.FinishFill(ctx); err == nil {
			fmt.Fprintf(stderr, "bench fill: expired keys moved in key order in %s\n", time.Since(t).Round(time.Second))
		}
	}
	if err != nil {
		return fmt.Errorf("bench fill: %w", err)
	}
	return nil
}

// fillBatches makes the batches of [0, n) on every core but one and hands
// them to write in order, one at a time.
func fillBatches(ctx context.Context, n, size int, build func(from, to int) (*payment.Snapshot, error), write func(s *payment.Snapshot, done int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type made struct {
		s   *payment.Snapshot
		err error
	}
	workers := max(1, runtime.GOMAXPROCS(0)-1)
	slots := make(chan chan made, workers+1) // in order, at most a few ahead
	go func() {
		defer close(slots)
		sem := make(chan struct{}, workers)
		for from := 0; from < n; from += size {
			c := make(chan made, 1)
			select {
			case slots <- c:
			case <-ctx.Done():
				return
			}
			sem <- struct{}{}
			go func(from, to int) {
				defer func() { <-sem }()
				s, err := build(from, to)
				c <- made{s, err}
			}(from, min(from+size, n))
		}
	}()
	done := 0
	for c := range slots {
		m := <-c
		if m.err != nil {
			return m.err
		}
		done += len(m.s.Payments)
		if err := write(m.s, done); err != nil {
			return err
		}
	}
	return ctx.Err()
}
