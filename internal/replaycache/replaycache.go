// Package replaycache keeps the final answers a store has read, so that a
// retry of a settled key, the request oncepay sees most in a retry storm, is
// answered without reading the database.
//
// A final answer never changes: the only change a settled key's record ever
// sees is its deletion by the purge. A purge made through the same store
// clears the cache once it commits. A purge made by another process (the
// purge command, another instance on the same PostgreSQL) bumps a version in
// the database, which the cache reads again when it is TTL old: the answers
// of a purged key are served for at most TTL after another process purged
// it, as a revoked API key is honoured for at most as long.
package replaycache

import (
	"context"
	"sync"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// TTL is how long the cache trusts the purge version it last read.
const TTL = 500 * time.Millisecond

// DefaultBytes is the default memory bound.
const DefaultBytes = 16 << 20

// entryOverhead is what an entry costs beyond its strings and bytes: the
// map slot, the Answer and the key's headers.
const entryOverhead = 160

// Cache maps (scope, key) to a final answer. The zero value is not usable;
// a nil *Cache caches nothing.
type Cache struct {
	max     int // bytes held by both generations together, at most
	now     func() time.Time
	version func(context.Context) (int64, error)

	refresh sync.Mutex // one version read at a time

	mu       sync.Mutex
	cur, old map[entryKey]entry // newest first; old is dropped when cur fills
	curBytes int
	oldBytes int
	hits     int64
	fills    int64
	gen      uint64 // bumped by Clear: a Put of an answer read before is dropped
	seen     int64  // the purge version the entries are good for
	checked  time.Time
}

type entryKey struct{ scope, key string }

type entry struct {
	a    *payment.Answer
	size int
}

// New returns a cache of at most maxBytes, or nil (no cache) if maxBytes is
// not positive. version reads the database's purge version; now is the clock
// TTL runs on.
func New(maxBytes int, version func(context.Context) (int64, error), now func() time.Time) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	return &Cache{max: maxBytes, version: version, now: now, cur: map[entryKey]entry{}}
}

// Get returns the cached answer for (scope, key) if there is one. On a miss
// it returns the generation to hand Put with the answer read from the
// database. An error is the version's read: the caller reads the database.
func (c *Cache) Get(ctx context.Context, scope, key string) (a *payment.Answer, gen uint64, err error) {
	if c == nil {
		return nil, 0, nil
	}
	if err := c.check(ctx); err != nil {
		return nil, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := entryKey{scope, key}
	if e, ok := c.cur[k]; ok {
		c.hits++
		return e.a, c.gen, nil
	}
	if e, ok := c.old[k]; ok {
		delete(c.old, k)
		c.oldBytes -= e.size
		c.add(k, e)
		c.hits++
		return e.a, c.gen, nil
	}
	return nil, c.gen, nil
}

// Put caches a, read from the database after Get returned gen, if it is
// final and no Clear came in between.
func (c *Cache) Put(gen uint64, scope, key string, a *payment.Answer) {
	if c == nil || a.Status == payment.InProgress {
		return
	}
	e := entry{a: a, size: entryOverhead + len(scope) + len(key) + len(a.RequestHash) + len(a.ResponseBody)}
	if e.size > c.max/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.add(entryKey{scope, key}, e)
		c.fills++
	}
}

// add puts e in the newest generation, in place of any answer k has (many
// replays of one key may miss at once), first retiring the generation if
// full. c.mu is held.
func (c *Cache) add(k entryKey, e entry) {
	if prev, ok := c.cur[k]; ok {
		delete(c.cur, k)
		c.curBytes -= prev.size
	} else if prev, ok := c.old[k]; ok {
		delete(c.old, k)
		c.oldBytes -= prev.size
	}
	if c.curBytes+e.size > c.max/2 {
		c.old, c.cur = c.cur, make(map[entryKey]entry, len(c.cur))
		c.oldBytes, c.curBytes = c.curBytes, 0
	}
	c.cur[k] = e
	c.curBytes += e.size
}

// Clear drops every answer. The store calls it after a purge commits, with
// the purge version that purge left: a version read later is compared with
// it, so another process's purge after this one is still seen.
func (c *Cache) Clear(version int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	c.seen = max(c.seen, version)
}

func (c *Cache) clear() {
	c.cur, c.old, c.curBytes, c.oldBytes = map[entryKey]entry{}, nil, 0, 0
	c.gen++
}

// Stats is what a cache did: replays it answered, final answers it kept,
// and the bytes it holds now.
type Stats struct {
	Hits, Fills int64
	Bytes       int
}

// Stats returns c's counters; a nil cache's are zero.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Hits: c.hits, Fills: c.fills, Bytes: c.curBytes + c.oldBytes}
}

// check reads the purge version again when the last read is TTL old, and
// clears the cache if another process purged since.
func (c *Cache) check(ctx context.Context) error {
	if c.fresh() {
		return nil
	}
	c.refresh.Lock()
	defer c.refresh.Unlock()
	if c.fresh() { // another request read it meanwhile
		return nil
	}
	// The clock is read before the version: a purge committed while it is
	// read is seen by the next check, within TTL.
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	at := c.now()
	v, err := c.version(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		// This process purged (Clear) while the version was read: v may
		// be older than the version Clear recorded. The next Get reads it
		// again; what is cached now was read after that purge.
		return nil
	}
	if v != c.seen {
		c.clear()
		c.seen = v
	}
	c.checked = at
	return nil
}

func (c *Cache) fresh() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	age := c.now().Sub(c.checked)
	return !c.checked.IsZero() && age >= 0 && age < TTL
}
