package sqlitestore

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// stepClock is a clock tests move by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newKey(t *testing.T, db *DB) (merchant, keyID, secret string) {
	t.Helper()
	ctx := context.Background()
	m, err := db.CreateMerchant(ctx, "shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := db.CreateAPIKey(ctx, m.ID, "k", t0)
	if err != nil {
		t.Fatal(err)
	}
	return m.ID, k.ID, secret
}

func wantScope(t *testing.T, db *DB, secret, want string) {
	t.Helper()
	got, err := db.Authenticate(context.Background(), secret)
	if err != nil || got != want {
		t.Fatalf("Authenticate = %q, %v, want %q", got, err, want)
	}
}

func wantUnauthorized(t *testing.T, db *DB, secret, when string) {
	t.Helper()
	if scope, err := db.Authenticate(context.Background(), secret); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
		t.Fatalf("Authenticate %s = %q, %v, want %s", when, scope, err, payment.EUNAUTHORIZED)
	}
}

// A key revoked through this process is refused by the very next request,
// while the view of the keys is still young: the revocation invalidates it.
func TestRevokeEffectiveAtOnce(t *testing.T) {
	clock := &stepClock{now: t0}
	db := MustOpen(t, Options{Now: clock.Now})
	merchant, keyID, secret := newKey(t, db)
	wantScope(t, db, secret, merchant) // the view now holds the key
	if err := db.RevokeAPIKey(context.Background(), keyID, t0); err != nil {
		t.Fatal(err)
	}
	wantUnauthorized(t, db, secret, "right after the revocation, same clock")
}

// Another process sharing the file (the apikey CLI) revokes a key: this
// process refuses it once its view is KeyViewTTL old, and KeyViewTTL is
// within the second the contract allows. A key the other process makes
// works here at once.
func TestRevokeByAnotherProcess(t *testing.T) {
	if KeyViewTTL > time.Second {
		t.Fatalf("KeyViewTTL = %s, want at most 1s", KeyViewTTL)
	}
	path := filepath.Join(t.TempDir(), "oncepay.db")
	clock := &stepClock{now: t0}
	server := mustOpenPath(t, path, Options{Now: clock.Now})
	cli := mustOpenPath(t, path, Options{})

	merchant, keyID, secret := newKey(t, cli)
	wantScope(t, server, secret, merchant)
	if err := cli.RevokeAPIKey(context.Background(), keyID, t0); err != nil {
		t.Fatal(err)
	}
	clock.Add(KeyViewTTL)
	wantUnauthorized(t, server, secret, "KeyViewTTL after another process revoked it")

	k, fresh, err := cli.CreateAPIKey(context.Background(), merchant, "new", t0)
	if err != nil {
		t.Fatal(err)
	}
	wantScope(t, server, fresh, merchant)
	if err := cli.RevokeAPIKey(context.Background(), k.ID, t0); err != nil {
		t.Fatal(err)
	}
	clock.Add(KeyViewTTL)
	wantUnauthorized(t, server, fresh, "KeyViewTTL after another process revoked a key it never cached")
}

// A reload that read the keys before a revocation committed, and finishes
// after it, does not bring the revoked key back.
func TestRevokeDuringReload(t *testing.T) {
	db := MustOpen(t, Options{})
	merchant, keyID, secret := newKey(t, db)
	db.keys.invalidate()
	hash := sha256.Sum256([]byte(secret))
	slowLoad := func(ctx context.Context) (map[[sha256.Size]byte]string, error) {
		live, err := db.liveKeys(ctx) // still holds the key
		if err == nil {
			err = db.RevokeAPIKey(ctx, keyID, t0)
		}
		return live, err
	}
	if got, ok, err := db.keys.lookup(context.Background(), hash, slowLoad); err != nil || !ok || got != merchant {
		t.Fatalf("lookup during the revocation = %q, %v, %v, want the merchant (the request began before it)", got, ok, err)
	}
	wantUnauthorized(t, db, secret, "after the revocation that raced a reload")
}

// The view is read again once it is KeyViewTTL old, not before, and at once
// if the clock went back (its age would lie); a change made through this
// process makes it stale whatever its age.
func TestKeyViewReloads(t *testing.T) {
	clock := &stepClock{now: t0}
	v := &keyView{now: clock.Now}
	loads := 0
	load := func(context.Context) (map[[sha256.Size]byte]string, error) {
		loads++
		return map[[sha256.Size]byte]string{}, nil
	}
	for _, tt := range []struct {
		step       time.Duration
		invalidate bool
		want       int
	}{
		{0, false, 1},                            // the first lookup loads
		{0, false, 1},                            // at age 0 it is fresh
		{KeyViewTTL - time.Nanosecond, false, 1}, // a moment before the TTL
		{time.Nanosecond, false, 2},              // at the TTL it is read again
		{-time.Second, false, 3},                 // the clock went back
		{0, true, 4},                             // a key changed here
	} {
		clock.Add(tt.step)
		if tt.invalidate {
			v.gen.Add(1)
		}
		if _, _, err := v.lookup(context.Background(), [sha256.Size]byte{}, load); err != nil {
			t.Fatal(err)
		}
		if loads != tt.want {
			t.Fatalf("after a step of %v: %d loads, want %d", tt.step, loads, tt.want)
		}
	}
}
