package batchlog

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// out records what was written and with how many calls; gate, if set,
// holds every call until it is closed.
type out struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	calls int
	gate  chan struct{}
}

func (o *out) Write(p []byte) (int, error) {
	if o.gate != nil {
		<-o.gate
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	return o.buf.Write(p)
}

func (o *out) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Lines from many goroutines are each written once, whole, each
// goroutine's in its order, and Close writes what still waits: at once, or
// after a linger.
func TestEveryLineOnceInOrder(t *testing.T) {
	for _, linger := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond} {
		t.Run(linger.String(), func(t *testing.T) { everyLineOnceInOrder(t, linger) })
	}
}

func everyLineOnceInOrder(t *testing.T, linger time.Duration) {
	o := &out{}
	w := New(o, linger)
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "g%d line %d\n", g, i)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	got := strings.Split(strings.TrimSuffix(o.String(), "\n"), "\n")
	for _, l := range got {
		var g string
		var i int
		if _, err := fmt.Sscanf(l, "%s line %d", &g, &i); err != nil || i != next[g] {
			t.Fatalf("line %q: want %s line %d", l, g, next[g])
		}
		next[g]++
	}
	if len(got) != writers*lines {
		t.Fatalf("%d lines written, want %d", len(got), writers*lines)
	}
	fmt.Fprintln(w, "after close")
	if !strings.HasSuffix(o.String(), "after close\n") {
		t.Error("a line written after Close was not written")
	}
}

// While a write is under way the lines that come meanwhile wait, and go
// out together in the next call: one call per batch, not per line.
func TestLinesWrittenInBatches(t *testing.T) {
	o := &out{gate: make(chan struct{})}
	w := New(o, 0)
	fmt.Fprintln(w, "first") // the goroutine takes it and blocks in the gate
	time.Sleep(20 * time.Millisecond)
	for i := range 100 {
		fmt.Fprintln(w, "line", i)
	}
	close(o.gate)
	w.Close()
	if o.calls > 3 || !strings.Contains(o.String(), "line 99\n") {
		t.Errorf("101 lines in %d calls, want at most 3 (the first, the batch that waited)", o.calls)
	}
}

// An output that does not take lines bounds what waits: past MaxPending a
// Write waits for the output.
func TestStuckOutputBoundsMemory(t *testing.T) {
	o := &out{gate: make(chan struct{})}
	w := New(o, 0)
	line := []byte(strings.Repeat("x", 1023) + "\n")
	returned := make(chan int)
	go func() {
		n := 0
		for n <= 2*MaxPending {
			w.Write(line)
			n += len(line)
		}
		returned <- n
	}()
	select {
	case n := <-returned:
		t.Fatalf("%d bytes accepted while the output was stuck, want Write to wait past %d", n, MaxPending)
	case <-time.After(200 * time.Millisecond):
	}
	w.mu.Lock()
	pending := len(w.pending)
	w.mu.Unlock()
	if pending > MaxPending+len(line) {
		t.Errorf("%d bytes waiting, over MaxPending", pending)
	}
	close(o.gate)
	<-returned
	w.Close()
}

// With a linger, the lines logged within it go out in one call, without
// Close, and an idle writer's line waits the linger, not much longer.
func TestLingerGathersLines(t *testing.T) {
	o := &out{}
	w := New(o, time.Second)
	defer w.Close()
	fmt.Fprintln(w, "line", 0)
	time.Sleep(50 * time.Millisecond) // long enough for the goroutine to take it
	for i := range 99 {
		fmt.Fprintln(w, "line", i+1)
	}
	waitFor(t, o, "line 99\n", 10*time.Second)
	o.mu.Lock()
	calls := o.calls
	o.mu.Unlock()
	if calls != 1 {
		t.Errorf("100 lines logged within the linger, 50 ms apart, took %d calls, want 1", calls)
	}

	start := time.Now()
	fmt.Fprintln(w, "alone")
	waitFor(t, o, "alone\n", 10*time.Second)
	// Bounds loose enough for a loaded machine, tight enough to catch a
	// linger skipped or served twice.
	if d := time.Since(start); d < 500*time.Millisecond || d >= 1900*time.Millisecond {
		t.Errorf("an idle writer's line was written after %v, want about the 1 s linger", d)
	}
}

// waitFor waits until o holds s, or fails after limit.
func waitFor(t *testing.T, o *out, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(o.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%q not written within %v", s, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// Close writes what is waiting at once, without waiting out the linger.
func TestCloseDoesNotWaitTheLinger(t *testing.T) {
	o := &out{}
	w := New(o, time.Hour)
	fmt.Fprintln(w, "last words")
	time.Sleep(100 * time.Millisecond) // the goroutine is lingering
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the linger")
	}
	if o.String() != "last words\n" {
		t.Errorf("after Close the output is %q, want the waiting line", o.String())
	}
}
