package replica_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/oncepay/oncepay/replica"
	"github.com/oncepay/oncepay/sqlitestore"
)

// An s3:// replica, its endpoint, region and credentials from the AWS
// variables, on an S3 fake: replicated and restored like a directory.
func TestS3Replica(t *testing.T) {
	mem := s3mem.New()
	if err := mem.CreateBucket("oncepay-test"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(mem).Server())
	t.Cleanup(s3.Close)
	useS3(t, s3.URL)
	dir, url := t.TempDir(), "s3://oncepay-test/shop-1"
	db, rep := replicateTo(t, dir, url)
	claim(t, db, "a", 500, 4)
	if err := rep.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := rep.Status(); st.Errors != 0 || st.LastSync.IsZero() {
		t.Errorf("status = %+v, want a sync and no errors", st)
	}

	to := filepath.Join(dir, "restored.db")
	if _, err := replica.Restore(t.Context(), url, to, time.Time{}, quiet); err != nil {
		t.Fatal(err)
	}
	if n := count(t, openStore(t, to, sqlitestore.Options{})); n != 500 {
		t.Errorf("restored %d attempts from S3, want 500", n)
	}
}

// useS3 points the AWS variables at the S3 server at endpoint.
func useS3(t *testing.T, endpoint string) {
	t.Setenv("AWS_ENDPOINT_URL_S3", endpoint)
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	// A CA bundle makes the SDK refuse Litestream's own HTTP client
	// ("unable to add custom RootCAs"); a plain http:// fake needs none.
	t.Setenv("AWS_CA_BUNDLE", "")
}

// The S3 server goes away mid-replication and comes back on the same
// address: the syncs in between fail (counted, the lag grows), the next one
// after it returns ships everything, and a restore holds every write, those
// made while it was down included.
func TestS3ServerRestartedMidReplication(t *testing.T) {
	mem := s3mem.New()
	if err := mem.CreateBucket("oncepay-test"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: gofakes3.New(mem).Server()}
		go srv.Serve(ln)
		return srv
	}
	srv := serve(ln)
	useS3(t, "http://"+addr)
	dir, url := t.TempDir(), "s3://oncepay-test/shop-1"
	db, rep := replicateTo(t, dir, url)
	claim(t, db, "before", 300, 4)
	if err := rep.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}

	srv.Close() // the store is killed: its connections cut, its port closed
	claim(t, db, "down", 300, 4)
	// Litestream retries each request 8 times with backoff; a sync that has
	// not got through in 3 s has failed as far as the lag is concerned.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := rep.Sync(ctx); err == nil {
		t.Fatal("a sync to a stopped S3 server succeeded")
	}
	down := rep.Status()
	if down.Errors == 0 {
		t.Errorf("status while S3 is down = %+v, want failed syncs counted", down)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv = serve(ln)
	t.Cleanup(func() { srv.Close() })
	claim(t, db, "after", 300, 4)
	if err := rep.Sync(t.Context()); err != nil {
		t.Fatalf("sync after S3 came back: %v", err)
	}
	if up := rep.Status(); !up.Through.After(down.Through) || up.Lag >= down.Lag+time.Second {
		t.Errorf("status after S3 came back = %+v, want the replica caught up (while down: %+v)", up, down)
	}

	to := filepath.Join(dir, "restored.db")
	if _, err := replica.Restore(t.Context(), url, to, time.Time{}, quiet); err != nil {
		t.Fatal(err)
	}
	if n := count(t, openStore(t, to, sqlitestore.Options{})); n != 900 {
		t.Errorf("restored %d attempts from S3, want all 900, the 300 written while it was down among them", n)
	}
}
