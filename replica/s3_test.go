package replica_test

import (
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
	t.Setenv("AWS_ENDPOINT_URL_S3", s3.URL)
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	// A CA bundle makes the SDK refuse Litestream's own HTTP client
	// ("unable to add custom RootCAs"); a plain http:// fake needs none.
	t.Setenv("AWS_CA_BUNDLE", "")

	dir := t.TempDir()
	path := filepath.Join(dir, "oncepay.db")
	db := openStore(t, path, sqlitestore.Options{NoCheckpoint: true})
	url := "s3://oncepay-test/shop-1"
	rep, err := replica.Start(path, replica.Config{URL: url, SyncInterval: 20 * time.Millisecond, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close(t.Context()) })
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
