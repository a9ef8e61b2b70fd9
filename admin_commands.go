package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// runAPIKey manages merchant API keys: create prints the secret once, alone
// on the last line of stdout, so a script can take it with tail -n 1.
func runAPIKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	const synopsis = "apikey create NAME | list | revoke ID [--db FILE]"
	if len(args) == 0 {
		return fmt.Errorf("usage: oncepay %s", synopsis)
	}
	sub, args := args[0], args[1:]
	var cfg config
	fs := newFlagSet("apikey "+sub, synopsis, stderr)
	cfg.registerStore(fs)
	pos, err := parseFlags(fs, args, getenv)
	if err != nil {
		return err
	}
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()

	switch {
	case sub == "create" && len(pos) == 1:
		k, secret, err := db.CreateAPIKey(ctx, pos[0], time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created API key %s (%s); its secret is shown once, below:\n%s\n", k.ID, k.Name, secret)
		return nil
	case sub == "list" && len(pos) == 0:
		keys, err := db.APIKeys(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-22s %-24s %-20s %s\n", "ID", "NAME", "CREATED", "REVOKED")
		for _, k := range keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "%-22s %-24s %-20s %s\n", k.ID, k.Name, k.CreatedAt.Format(time.RFC3339), revoked)
		}
		return nil
	case sub == "revoke" && len(pos) == 1:
		if err := db.RevokeAPIKey(ctx, pos[0], time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s\n", pos[0])
		return nil
	}
	return errors.New("usage: oncepay " + synopsis)
}

// runBackup is "oncepay backup --to FILE": a consistent copy of the live
// database, taken while oncepay runs, with no sqlite3 tool needed.
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var (
		cfg config
		to  string
	)
	fs := newFlagSet("backup", "backup --to FILE [--db FILE]", stderr)
	cfg.registerStore(fs)
	fs.StringVar(&to, "to", "", "the backup file to write; it must not exist")
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if to == "" {
		return errors.New("backup: --to FILE is required")
	}
	db, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Backup(ctx, to); err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", cfg.db, to)
	return nil
}
