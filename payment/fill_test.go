package payment

import (
	"testing"
	"time"
)

// A fill's payments are made in the order of their index, from the span's
// start to the retention's edge, then the live ones within the retention,
// as a database that grew day by day holds them: what the purge deletes
// first lies together, and ids (which lead with their time) rise with it.
func TestFillTimesRiseWithinTheirBands(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f := &Fill{Now: now, Payments: 10_000_000, LiveKeys: 1_000_000, Retention: 24 * time.Hour, Span: 2 * 365 * 24 * time.Hour}
	live := f.Payments - f.LiveKeys
	var last time.Time
	for i := 0; i < f.Payments; i += 9973 {
		at := f.At(i)
		if at.Before(last) {
			t.Fatalf("payment %d made at %s, before payment %d's %s", i, at, i-9973, last)
		}
		if i < live && (at.Before(now.Add(-f.Span)) || !at.Before(now.Add(-f.Retention-time.Hour))) {
			t.Fatalf("old payment %d made at %s, want within the span and past the retention", i, at)
		}
		if i >= live && !at.After(now.Add(-f.Retention)) {
			t.Fatalf("live payment %d made at %s, want within the retention", i, at)
		}
		last = at
	}
	if first, end := f.At(0), f.At(live-1); end.Sub(first) < f.Span*9/10 {
		t.Errorf("old payments span %s to %s, want spread over the span", first, end)
	}
}
