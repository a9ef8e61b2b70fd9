// Package pgtest gives each test a database of its own on the PostgreSQL
// server ONCEPAY_TEST_POSTGRES names (scripts/test.sh starts a throwaway
// one when it is not given), so tests can run in parallel.
package pgtest

import (
	"context"
	"crypto/rand"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env is the variable naming the test server, as a postgres:// URL of a
// role allowed to create databases.
const Env = "ONCEPAY_TEST_POSTGRES"

// Server returns the test server's URL. Without one a test skips, except
// under CI (CI=true), where nothing may skip: it fails.
func Server(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(Env)
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set: under CI every PostgreSQL test must run (scripts/test.sh starts a server)", Env)
		}
		tb.Skipf("%s is not set: no PostgreSQL to test against (scripts/test.sh starts one)", Env)
	}
	return u
}

// URL creates a new, empty database on the test server and returns its URL;
// the database is dropped when the test ends, whoever is still connected.
func URL(tb testing.TB) string {
	tb.Helper()
	server := Server(tb)
	name := "oncepay_test_" + strings.ToLower(rand.Text()[:12])
	Admin(tb, `CREATE DATABASE `+name)
	tb.Cleanup(func() { Admin(tb, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	u, err := url.Parse(server)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Admin runs one statement on the test server's own database, as its
// operator would: ALTER DATABASE, pg_terminate_backend.
func Admin(tb testing.TB, stmt string) {
	tb.Helper()
	server := Server(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		tb.Fatalf("connect to %s: %v", Env, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		tb.Fatalf("%s: %v", stmt, err)
	}
}

// Exec runs one statement on the database at dbURL, as an operator would.
func Exec(tb testing.TB, dbURL, stmt string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		tb.Fatalf("%s: %v", stmt, err)
	}
}
