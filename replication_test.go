package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/sqlitestore"
)

// --replica is for a SQLite file, and its lag alarm must be reachable.
func TestReplicaFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", "postgres://oncepay@localhost/oncepay", "--replica", "file://" + dir}, "PostgreSQL"},
		{[]string{"--replica", "gs://bucket/path"}, "file:///path or s3://bucket/path"},
		{[]string{"--replica", "file://relative"}, "file:///"},
		{[]string{"--replica", "file://" + dir, "--replica-max-lag", "1s", "--replica-sync-interval", "1s"}, "--replica-max-lag"},
		{[]string{"--replica", "file://" + dir, "--replica-sync-interval", "0s"}, "--replica-sync-interval"},
	} {
		args := append([]string{"serve", "--db", filepath.Join(dir, "s.db")}, tt.args...)
		err := run(context.Background(), args, env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("serve %v = %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
}

// serve with a replica logs where it replicates, and warns when the sync
// interval and lag alarm, or the replica's history, cannot keep the
// retention rule (docs/replication.md).
func TestReplicaRetentionRule(t *testing.T) {
	for _, tt := range []struct {
		name  string
		args  []string
		warns []string
	}{
		{"defaults", nil, nil},
		{"lag past the window", []string{"--replica-max-lag", "30h"}, []string{"cannot keep the retention rule"}},
		{"short history", []string{"--replica-retention", "1h"}, []string{"keeps less history than the provider's idempotency window"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := serveLogs(t, append([]string{"--db", filepath.Join(dir, "s.db"), "--replica", "file://" + filepath.Join(dir, "replica")}, tt.args...))
			if !strings.Contains(logs, `"msg":"replicating"`) {
				t.Errorf("serve does not say it replicates:\n%s", logs)
			}
			for _, w := range []string{"cannot keep the retention rule", "keeps less history"} {
				want := false
				for _, ww := range tt.warns {
					want = want || strings.Contains(ww, w)
				}
				if got := strings.Contains(logs, w); got != want {
					t.Errorf("warning %q logged: %v, want %v:\n%s", w, got, want, logs)
				}
			}
		})
	}
}

// serveLogs runs serve with args until it listens, stops it, and returns
// what it logged until then.
func serveLogs(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), env(nil), io.Discard, pw)
		pw.Close()
	}()
	var logs strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		logs.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `"msg":"listening"`) {
			break
		}
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, logs.String())
	}
	return logs.String()
}

// restore writes only a new file, from a replica that exists; a refusal
// leaves the files as they were.
func TestRestoreRefusals(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := "file://" + filepath.Join(dir, "no-replica")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", empty}, "required"},
		{[]string{"--from", empty, "--to", existing}, "refuses to overwrite"},
		{[]string{"--from", empty, "--to", filepath.Join(dir, "new.db")}, "no replica there"},
		{[]string{"--from", empty, "--to", filepath.Join(dir, "new.db"), "--at", "yesterday"}, "RFC 3339"},
		{[]string{"--from", "/not/a/url", "--to", filepath.Join(dir, "new.db")}, "file:///path or s3://bucket/path"},
	} {
		err := run(context.Background(), append([]string{"restore"}, tt.args...), env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("restore %v = %v, want an error naming %q", tt.args, err, tt.want)
		}
	}
	if b, _ := os.ReadFile(existing); !bytes.Equal(b, []byte("keep me")) {
		t.Errorf("the existing file now holds %q", b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "existing.db" {
			t.Errorf("a refused restore left %s behind", e.Name())
		}
	}
}

// A one-shot command writing to a file a replicated server holds open never
// checkpoints it: Litestream must be the only checkpointer, and the command
// cannot know the file is replicated. The server's WAL below is past
// SQLite's automatic checkpoint (1,000 pages); a command that checkpointed
// would move it into the database file.
func TestCommandsLeaveCheckpointsToTheServer(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	server, err := sqlitestore.Open(ctx, path, schema, sqlitestore.Options{NoCheckpoint: true})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	for i := range 400 {
		a := storetest.NewAttempt(fmt.Sprintf("k-%d", i), time.Now(), time.Minute)
		if ok, err := server.Claim(ctx, a); err != nil || !ok {
			t.Fatalf("claim %d = %v, %v", i, ok, err)
		}
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"merchant", "create", "corner-shop", "--db", path}, env(nil), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() {
		t.Errorf("database file %d bytes before the command, %d after: the command checkpointed a replicated file", before.Size(), after.Size())
	}
}
