package replaycache

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// store is the database's purge version, as the cache reads it.
type store struct {
	v     int64
	err   error
	reads int
}

func (s *store) version(context.Context) (int64, error) { s.reads++; return s.v, s.err }

func newCache(t *testing.T, max int) (*Cache, *store, *clock) {
	t.Helper()
	s, c := &store{}, &clock{t: time.Unix(1_800_000_000, 0)}
	return New(max, s.version, c.now), s, c
}

func final(body string) *payment.Answer {
	return &payment.Answer{RequestHash: []byte("hash"), Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte(body)}
}

func get(t *testing.T, c *Cache, key string) (*payment.Answer, uint64) {
	t.Helper()
	a, gen, err := c.Get(context.Background(), "mer_1", key)
	if err != nil {
		t.Fatal(err)
	}
	return a, gen
}

func TestFinalAnswersAreKeptInProgressNot(t *testing.T) {
	c, _, _ := newCache(t, 1<<20)
	a, gen := get(t, c, "k1")
	if a != nil {
		t.Fatal("empty cache answered")
	}
	want := final(`{"id":"pay_1"}`)
	c.Put(gen, "mer_1", "k1", want)
	c.Put(gen, "mer_1", "k2", &payment.Answer{Status: payment.InProgress})
	if a, _ := get(t, c, "k1"); a != want {
		t.Fatalf("k1: got %v, want the answer put", a)
	}
	if s := c.Stats(); s.Hits != 1 || s.Fills != 1 || s.Bytes == 0 {
		t.Errorf("Stats = %+v, want 1 hit, 1 fill, some bytes", s)
	}
	if a, _ := get(t, c, "k2"); a != nil {
		t.Fatal("an answer in progress was cached: it changes when recorded")
	}
	if a, _, _ := c.Get(context.Background(), "mer_2", "k1"); a != nil {
		t.Fatal("another scope's key answered")
	}
}

// A Clear (a purge through this store) drops what is cached, and a Put of
// an answer read before it is not kept: it may be the purged row.
func TestClearDropsAndRefusesAnswersReadBefore(t *testing.T) {
	c, _, _ := newCache(t, 1<<20)
	_, gen := get(t, c, "k1")
	c.Put(gen, "mer_1", "k1", final("a"))
	_, before := get(t, c, "k2") // a read of k2 begins
	c.Clear(1)
	c.Put(before, "mer_1", "k2", final("b")) // ... and ends after the purge
	if a, _ := get(t, c, "k1"); a != nil {
		t.Fatal("k1 answered after Clear")
	}
	if a, _ := get(t, c, "k2"); a != nil {
		t.Fatal("an answer read before Clear was cached after it")
	}
}

// A purge by another process is seen when the version is TTL old, and not
// before: the version is read once per TTL, not per replay.
func TestAnotherProcesssPurgeIsSeenWithinTTL(t *testing.T) {
	c, s, clk := newCache(t, 1<<20)
	_, gen := get(t, c, "k1")
	c.Put(gen, "mer_1", "k1", final("a"))
	s.v++ // another process purged
	clk.t = clk.t.Add(TTL - time.Millisecond)
	if a, _ := get(t, c, "k1"); a == nil {
		t.Fatal("the version was read again before TTL")
	}
	clk.t = clk.t.Add(time.Millisecond)
	if a, _ := get(t, c, "k1"); a != nil {
		t.Fatal("still answered TTL after another process purged")
	}
	if s.reads != 2 {
		t.Fatalf("version read %d times, want 2 (first use, then after TTL)", s.reads)
	}
	s.err = errors.New("disk gone")
	clk.t = clk.t.Add(TTL)
	if _, _, err := c.Get(context.Background(), "mer_1", "k1"); err == nil {
		t.Fatal("a failed version read was not reported")
	}
}

// The memory bound holds: a full generation is retired, the one before it
// dropped; a used answer moves to the newest generation.
func TestMemoryIsBounded(t *testing.T) {
	const max = 64 << 10
	c, _, _ := newCache(t, max)
	body := strings.Repeat("x", 1000)
	for i := range 1000 {
		_, gen := get(t, c, "k")
		c.Put(gen, "mer_1", "key-"+string(rune('a'+i%26))+strings.Repeat("y", i/26), final(body))
		if c.curBytes > max/2 {
			t.Fatalf("after %d puts the newest generation holds %d bytes, over half of %d", i+1, c.curBytes, max)
		}
	}
	held := 0
	for _, m := range []map[entryKey]entry{c.cur, c.old} {
		for _, e := range m {
			held += e.size
		}
	}
	if held > max || c.Stats().Bytes != held {
		t.Fatalf("the cache holds %d bytes (Stats says %d), its bound is %d", held, c.Stats().Bytes, max)
	}
	_, gen := get(t, c, "big")
	c.Put(gen, "mer_1", "big", final(strings.Repeat("z", max)))
	if a, _ := get(t, c, "big"); a != nil {
		t.Fatal("an answer larger than an eighth of the bound was cached")
	}
}

// Many replays of one key that miss at once each put its answer: it is
// held, and counted, once.
func TestOneKeyPutManyTimesIsHeldOnce(t *testing.T) {
	c, _, _ := newCache(t, 1<<20)
	_, gen := get(t, c, "k1")
	c.Put(gen, "mer_1", "k1", final("a"))
	once := c.Stats().Bytes
	for range 100 {
		c.Put(gen, "mer_1", "k1", final("a"))
	}
	if got := c.Stats().Bytes; got != once {
		t.Errorf("after 101 puts of one key the cache holds %d bytes, want %d", got, once)
	}
}

// A Clear records the version its purge left: a later purge by another
// process is seen, this one's own is not taken for another's.
func TestClearRemembersItsPurgesVersion(t *testing.T) {
	c, s, clk := newCache(t, 1<<20)
	get(t, c, "k1")
	s.v = 1 // this process purged
	c.Clear(1)
	_, gen := get(t, c, "k1")
	c.Put(gen, "mer_1", "k1", final("a"))
	clk.t = clk.t.Add(TTL)
	if a, _ := get(t, c, "k1"); a == nil {
		t.Fatal("this process's own purge, read back from the database, cleared the cache again")
	}
	s.v = 2 // another process purged
	clk.t = clk.t.Add(TTL)
	if a, _ := get(t, c, "k1"); a != nil {
		t.Fatal("another process's purge after this one's was not seen")
	}
}

// A version read while this process purged is not taken over the version
// that purge recorded: it may be older.
func TestVersionReadDuringOwnPurgeIsNotTaken(t *testing.T) {
	s, clk := &store{}, &clock{t: time.Unix(1_800_000_000, 0)}
	var c *Cache
	c = New(1<<20, func(ctx context.Context) (int64, error) {
		v := s.v
		if s.reads++; s.reads == 2 {
			c.Clear(v + 1) // this process's purge commits while the version is read
		}
		return v, nil
	}, clk.now)
	get(t, c, "k1") // first read: version 0
	clk.t = clk.t.Add(TTL)
	get(t, c, "k1") // second read races the purge: 0 read, 1 recorded
	if c.seen != 1 {
		t.Fatalf("seen = %d after a version read raced this process's purge, want 1 (the purge's)", c.seen)
	}
}

// An entry costs its strings and bytes plus entryOverhead; one of exactly
// an eighth of the bound is kept, one byte more is not; a generation fills
// to exactly half the bound before it is retired.
func TestSizesAndBounds(t *testing.T) {
	const max = 8 << 10
	c, _, _ := newCache(t, max)
	_, gen := get(t, c, "k1")
	c.Put(gen, "mer_1", "k1", final("a"))
	if got, want := c.Stats().Bytes, entryOverhead+len("mer_1")+len("k1")+len("hash")+len("a"); got != want {
		t.Fatalf("one entry counts %d bytes, want %d", got, want)
	}
	body := func(size int) string {
		return strings.Repeat("b", size-entryOverhead-len("mer_1")-len("kX")-len("hash"))
	}
	for _, tc := range []struct {
		key  string
		size int
		kept bool
	}{{"k2", max / 8, true}, {"k3", max/8 + 1, false}} {
		c.Put(gen, "mer_1", tc.key, final(body(tc.size)))
		if a, _ := get(t, c, tc.key); (a != nil) != tc.kept {
			t.Errorf("an entry of %d bytes (bound %d): kept %v, want %v", tc.size, max, a != nil, tc.kept)
		}
	}

	c, _, _ = newCache(t, max)
	_, gen = get(t, c, "k")
	for i := range 4 { // four of an eighth fill a generation exactly
		c.Put(gen, "mer_1", "k"+strconv.Itoa(i), final(body(max/8)))
	}
	for i := range 4 {
		if a, _ := get(t, c, "k"+strconv.Itoa(i)); a == nil {
			t.Fatalf("k%d dropped from a generation filled to exactly half the bound", i)
		}
	}
	if len(c.old) != 0 {
		t.Errorf("a generation filled to exactly half the bound was retired")
	}
}

// Many small answers are all kept while they fit.
func TestManyAnswersKept(t *testing.T) {
	c, s, _ := newCache(t, 1<<20)
	_, gen := get(t, c, "k")
	for i := range 100 {
		c.Put(gen, "mer_1", "k"+strconv.Itoa(i), final("a"))
	}
	for i := range 100 {
		if a, _ := get(t, c, "k"+strconv.Itoa(i)); a == nil {
			t.Fatalf("k%d of 100 small answers dropped", i)
		}
	}
	if s.reads != 1 {
		t.Errorf("the version was read %d times at one instant, want once", s.reads)
	}
}

func TestNilCacheCachesNothing(t *testing.T) {
	var c *Cache = New(0, nil, nil)
	c.Put(0, "mer_1", "k1", final("a"))
	c.Clear(1)
	if a, _, err := c.Get(context.Background(), "mer_1", "k1"); a != nil || err != nil {
		t.Fatal("a nil cache answered")
	}
}
