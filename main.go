// Command oncepay is an idempotency layer for payments: a retried payment is
// charged at most once. See README.md.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

//go:embed schema.sql
var schema string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	processLog = true
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "oncepay:", err)
		}
		os.Exit(2)
	}
}

const usage = `oncepay: a retried payment is charged at most once.

Usage:
  oncepay demo                  workshop mode: simulated provider, no API keys
  oncepay serve                 the payment API for merchants (API keys required)
  oncepay reconcile             settle stale attempts once, then exit
  oncepay purge                 delete what is past its retention (keys, events) once, then exit
  oncepay forward               send the payments queued while the provider was unreachable once, then exit
  oncepay sim-provider          the simulated provider as its own HTTP server
  oncepay merchant create NAME  make a merchant: the scope of its payments and keys
  oncepay merchant list         list merchants, with their offline limits
  oncepay merchant offline ID --max-amount MINOR --max-total MINOR --max-age DURATION | --disable
                                a merchant's limits for payments taken while the provider is unreachable
  oncepay apikey create --merchant ID [--name NAME]
                                make an API key of a merchant (its secret printed once)
  oncepay apikey create NAME    make a merchant NAME with one API key
  oncepay apikey list           list API keys
  oncepay apikey revoke ID      revoke an API key
  oncepay endpoint add --merchant ID --url URL [--events TYPES]
                                where a merchant is sent its events (its signing secret printed once)
  oncepay endpoint list | disable ID | rotate-secret ID
                                list endpoints, stop sending to one, give one a new secret
  oncepay deliver               send merchants' events due to their endpoints once, then exit
  oncepay backup --to FILE      copy the live SQLite database consistently (PostgreSQL: pg_dump)
  oncepay vacuum                make an older SQLite file shrink with its purges (rewrites it once)
  oncepay restore --from URL --to FILE [--at TIME]
                                bring back the SQLite database that serve --replica replicated
  oncepay copy --from FILE --to postgres://...
                                move a SQLite installation to an empty PostgreSQL database
  oncepay version               print the version
  oncepay bench                 drive a running server with load, then check no payment was charged twice
  oncepay bench fill --db FILE|URL --payments N --live-keys N --merchants N
                                make a large realistic database to measure on (prints each merchant's API key)

Every flag can also be set with an ONCEPAY_* environment variable;
"oncepay COMMAND --help" lists them with their defaults.
`

// run is the whole program; main only hands it the process's environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, args, getenv, stdout, stderr, false)
	case "demo":
		return runServe(ctx, args, getenv, stdout, stderr, true)
	case "reconcile":
		return runReconcile(ctx, args, getenv, stdout, stderr)
	case "purge":
		return runPurge(ctx, args, getenv, stdout, stderr)
	case "forward":
		return runForward(ctx, args, getenv, stdout, stderr)
	case "sim-provider":
		return runSimProvider(ctx, args, getenv, stderr)
	case "merchant":
		return runMerchant(ctx, args, getenv, stdout, stderr)
	case "apikey":
		return runAPIKey(ctx, args, getenv, stdout, stderr)
	case "endpoint":
		return runEndpoint(ctx, args, getenv, stdout, stderr)
	case "deliver":
		return runDeliver(ctx, args, getenv, stdout, stderr)
	case "backup":
		return runBackup(ctx, args, getenv, stdout, stderr)
	case "vacuum":
		return runVacuum(ctx, args, getenv, stdout, stderr)
	case "restore":
		return runRestore(ctx, args, getenv, stdout, stderr)
	case "copy":
		return runCopy(ctx, args, getenv, stdout, stderr)
	case "bench":
		return runBench(ctx, args, getenv, stdout, stderr)
	case "version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}
