package sim

import (
	"strconv"
	"testing"
)

// The call log holds at most MaxCallKeys keys, and at least the
// MaxCallKeys/2 called last, whatever the number of calls: older keys are
// forgotten, a key called again keeps one entry and its counts.
func TestCallLogIsBounded(t *testing.T) {
	var l callLog
	const extra = 10
	for i := range MaxCallKeys + extra {
		l.add("k"+strconv.Itoa(i), opCharge)
		l.add("k"+strconv.Itoa(i), opLookup)
	}
	if n := len(l.cur) + len(l.old); n > MaxCallKeys || n < MaxCallKeys/2 {
		t.Fatalf("%d keys held, want %d-%d", n, MaxCallKeys/2, MaxCallKeys)
	}
	for i := range extra {
		key := "k" + strconv.Itoa(i)
		if _, ok := l.old[key]; ok {
			t.Errorf("%s, among the oldest, is still held", key)
		}
		if _, ok := l.cur[key]; ok {
			t.Errorf("%s, among the oldest, is still held", key)
		}
	}
	for _, i := range []int{MaxCallKeys + extra - MaxCallKeys/2, MaxCallKeys + extra - 1} {
		key := "k" + strconv.Itoa(i)
		c, ok := l.cur[key]
		if !ok {
			c, ok = l.old[key]
		}
		if !ok || c[opCharge] != 1 || c[opLookup] != 1 {
			t.Errorf("%s, among the %d called last: held %v, calls %v; want 1 charge, 1 lookup", key, MaxCallKeys/2, ok, c)
		}
	}
}
