package sqlitestore

import (
	"context"
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"
)

// KeyViewTTL is how long the in-memory view of the live API keys is trusted
// before it is read again. A key revoked by another process sharing the
// database (the apikey CLI) stops working within it; one revoked through
// this DB stops at once.
const KeyViewTTL = 500 * time.Millisecond

// keyView is a copy of the live API keys, so that authenticating a request
// reads no database. It holds the keys' SHA-256 hashes, as the table does,
// never a secret.
type keyView struct {
	now  func() time.Time
	gen  atomic.Uint64 // bumped when this process changes a key
	snap atomic.Pointer[keySnapshot]
	mu   sync.Mutex // one reload at a time
}

type keySnapshot struct {
	merchantOf map[[sha256.Size]byte]string // secret hash -> merchant id
	loadedAt   time.Time
	gen        uint64 // the generation the load started in
}

// lookup returns the merchant of the secret hash and whether the view knows
// it, reloading the view first if it is stale or was invalidated.
func (v *keyView) lookup(ctx context.Context, hash [sha256.Size]byte, load func(context.Context) (map[[sha256.Size]byte]string, error)) (string, bool, error) {
	s := v.snap.Load()
	if !v.fresh(s) {
		var err error
		if s, err = v.reload(ctx, load); err != nil {
			return "", false, err
		}
	}
	m, ok := s.merchantOf[hash]
	return m, ok, nil
}

func (v *keyView) fresh(s *keySnapshot) bool {
	if s == nil || s.gen != v.gen.Load() {
		return false
	}
	age := v.now().Sub(s.loadedAt)
	return age >= 0 && age < KeyViewTTL
}

func (v *keyView) reload(ctx context.Context, load func(context.Context) (map[[sha256.Size]byte]string, error)) (*keySnapshot, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.snap.Load(); v.fresh(s) { // another request reloaded it meanwhile
		return s, nil
	}
	// The generation and the clock are read before the keys: a change made
	// while they load leaves this snapshot already stale.
	s := &keySnapshot{gen: v.gen.Load(), loadedAt: v.now()}
	var err error
	if s.merchantOf, err = load(ctx); err != nil {
		return nil, err
	}
	v.snap.Store(s)
	return s, nil
}

// invalidate makes the next lookup read the keys again. It is called after
// a change to the keys is committed.
func (v *keyView) invalidate() {
	v.gen.Add(1)
	v.snap.Store(nil)
}
