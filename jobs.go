package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/robfig/cron/v3"
)

// startJobs schedules reconcile, purge, the inbox sweep, the forwarder and
// the deliverer on cron, in UTC: a panic is recovered and logged, and a run
// still going when the next is due makes that one skip, so runs never
// overlap.
func startJobs(ctx context.Context, log *slog.Logger, cfg *config, rec *payment.Reconciler, pur *payment.Purger, inbox *payment.Inbox,
	fwd *payment.Forwarder, dlv *payment.Deliverer) (*cron.Cron, error) {
	cl := cronLogger{log}
	c := cron.New(cron.WithLocation(time.UTC), cron.WithLogger(cl),
		cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl)))
	for _, job := range []struct {
		flag, spec string
		run        func()
	}{
		{"--reconcile-schedule", cfg.reconcileSchedule, func() { logRun(ctx, log, "reconcile", rec.RunOnce) }},
		{"--purge-schedule", cfg.purgeSchedule, func() { logRun(ctx, log, "purge", pur.RunOnce) }},
		{"--webhook-sweep-schedule", cfg.sweepSchedule, func() { logRun(ctx, log, "webhook sweep", inbox.Sweep) }},
		{"--forward-schedule", cfg.offline.forwardSchedule, func() { logRun(ctx, log, "forward", fwd.RunOnce) }},
		{"--deliver-schedule", cfg.delivery.schedule, func() { logDeliver(ctx, log, dlv) }},
	} {
		if job.spec == "off" { // run from a systemd timer instead
			continue
		}
		if _, err := c.AddFunc(job.spec, job.run); err != nil {
			return nil, fmt.Errorf("%s %q: %w", job.flag, job.spec, err)
		}
	}
	c.Start()
	return c, nil
}

// logRun runs a job once and logs one line of what it did.
func logRun[R fmt.Stringer](ctx context.Context, log *slog.Logger, name string, runOnce func(context.Context) (R, error)) {
	start := time.Now()
	res, err := runOnce(ctx)
	if err != nil {
		log.Error("job failed", "job", name, "result", res.String(), "err", err, "duration", time.Since(start))
		return
	}
	log.Info("job done", "job", name, "result", res.String(), "duration", time.Since(start))
}

// logDeliver runs the deliverer once and logs what it did, at debug when
// it found nothing to do: it runs every few seconds.
func logDeliver(ctx context.Context, log *slog.Logger, dlv *payment.Deliverer) {
	start := time.Now()
	res, err := dlv.RunOnce(ctx)
	switch {
	case err != nil:
		log.Error("job failed", "job", "deliver", "result", res.String(), "err", err, "duration", time.Since(start))
	case res.Due == 0:
		log.Debug("job done", "job", "deliver", "result", res.String(), "duration", time.Since(start))
	default:
		log.Info("job done", "job", "deliver", "result", res.String(), "duration", time.Since(start))
	}
}

// cronLogger lets cron log through slog.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}

// runReconcile is "oncepay reconcile": one pass now, for systemd timers and
// operators.
func runReconcile(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runProviderJob(ctx, "reconcile", args, getenv, stdout, stderr, func(a *app, cfg *config) (fmt.Stringer, error) {
		rec, err := a.reconciler(cfg)
		if err != nil {
			return nil, err
		}
		return rec.RunOnce(ctx)
	})
}

// runForward is "oncepay forward": one forward pass now, for an operator
// whose link is back, or a systemd timer.
func runForward(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runProviderJob(ctx, "forward", args, getenv, stdout, stderr, func(a *app, _ *config) (fmt.Stringer, error) {
		fwd, err := a.forwarder()
		if err != nil {
			return nil, err
		}
		return fwd.RunOnce(ctx)
	})
}

// runProviderJob runs one pass of a job that asks the provider, on the
// store and provider its flags name, and prints what it did.
func runProviderJob(ctx context.Context, name string, args []string, getenv func(string) string, stdout, stderr io.Writer,
	runOnce func(*app, *config) (fmt.Stringer, error)) error {
	cfg := config{stripeKey: getenv("STRIPE_SECRET_KEY")}
	fs := newFlagSet(name, name+" [flags]", stderr)
	cfg.registerStore(fs)
	cfg.registerProvider(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	a, err := cfg.open(ctx, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	defer a.Close()
	res, err := runOnce(a, &cfg)
	if res != nil {
		fmt.Fprintln(stdout, res)
	}
	return err
}

// runDeliver is "oncepay deliver": one pass of the deliverer now, for an
// operator or a systemd timer.
func runDeliver(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg config
	fs := newFlagSet("deliver", "deliver [flags]", stderr)
	cfg.registerStore(fs)
	cfg.delivery.register(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if err := cfg.delivery.validate(); err != nil {
		return err
	}
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	dlv, err := cfg.delivery.deliverer(db, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	res, err := dlv.RunOnce(ctx)
	fmt.Fprintln(stdout, res)
	return err
}

// runPurge is "oncepay purge": one pass now.
func runPurge(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg config
	fs := newFlagSet("purge", "purge [flags]", stderr)
	cfg.registerStore(fs)
	cfg.registerRetention(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	pur, err := newPurger(db, &cfg)
	if err != nil {
		return err
	}
	res, err := pur.RunOnce(ctx)
	fmt.Fprintln(stdout, res)
	return err
}
