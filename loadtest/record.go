package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"time"
)

// recorder is one worker's account of its requests. Workers never share
// one, so recording takes no lock; Report.merge combines them.
type recorder struct {
	lat      []time.Duration
	statuses map[int]int
	errors   int
	firstErr error
	keys     map[string]*keyObs
	bad      violations
	buf      bytes.Buffer // response bodies, reused
}

// keyObs is what a recorder saw of one idempotency key.
type keyObs struct {
	chargeID string // from the first 201
	sum      uint64 // hash of the first 201's body: every later 201 must be the same bytes
	created  bool   // a 201 was seen
	fresh    int    // 201s without Idempotent-Replayed: only the owner's may lack it
}

// seed hashes response bodies; one per process, so hashes of all recorders compare.
var seed = maphash.MakeSeed()

func newRecorder() *recorder {
	return &recorder{statuses: map[int]int{}, keys: map[string]*keyObs{}}
}

func (rec *recorder) obs(key string) *keyObs {
	o := rec.keys[key]
	if o == nil {
		o = &keyObs{}
		rec.keys[key] = o
	}
	return o
}

// fail records a request that got no answer.
func (rec *recorder) fail(key string, err error) {
	rec.obs(key)
	rec.errors++
	if rec.firstErr == nil {
		rec.firstErr = err
	}
}

// observe records one answer and checks what one answer can show: a 500 is
// a bug, a 201 must name its key and a charge, and every 201 of a key must
// be the same bytes.
func (rec *recorder) observe(key string, lat time.Duration, status int, replayed bool, body []byte) {
	rec.lat = append(rec.lat, lat)
	rec.statuses[status]++
	o := rec.obs(key)
	switch status {
	case http.StatusInternalServerError:
		rec.bad.add("key %s: 500 %s", key, body)
	case http.StatusCreated:
		if !replayed {
			o.fresh++
		}
		sum := maphash.Bytes(seed, body)
		if o.created {
			if sum != o.sum {
				rec.bad.add("key %s: a replayed 201 differs from the first: %s", key, body)
			}
			return
		}
		var p struct {
			ChargeID       string `json:"charge_id"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.ChargeID == "" || p.IdempotencyKey != key {
			rec.bad.add("key %s: 201 is not this key's charged payment: %s", key, body)
		}
		o.created, o.chargeID, o.sum = true, p.ChargeID, sum
	}
}

// merge adds what b saw of a key to what a saw of it.
func (a *keyObs) merge(b *keyObs, key string, bad *violations) {
	a.fresh += b.fresh
	switch {
	case !b.created:
	case !a.created:
		a.created, a.chargeID, a.sum = true, b.chargeID, b.sum
	case a.chargeID != b.chargeID:
		bad.add("key %s: two 201s name two charges, %s and %s", key, a.chargeID, b.chargeID)
	case a.sum != b.sum:
		bad.add("key %s: two 201s differ in their bytes", key)
	}
}

// violations collects broken invariants, keeping the first few messages.
type violations struct {
	n    int
	msgs []string
}

const keptViolations = 20

func (v *violations) add(format string, args ...any) {
	v.n++
	if len(v.msgs) < keptViolations {
		v.msgs = append(v.msgs, truncate(fmt.Sprintf(format, args...), 300))
	}
}

func (v *violations) addAll(w violations) {
	for _, m := range w.msgs {
		v.add("%s", m)
	}
	v.n += w.n - len(w.msgs)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Latencies are percentiles of request latency, from sending the request to
// reading the whole answer.
type Latencies struct {
	P50, P95, P99, Max time.Duration
}

// percentiles returns the latencies of sorted d (nearest rank).
func percentiles(d []time.Duration) Latencies {
	if len(d) == 0 {
		return Latencies{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.999999) - 1
		return d[max(0, min(i, len(d)-1))]
	}
	return Latencies{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: d[len(d)-1]}
}

// StormStats are the rounds of a storm: how long it took for all of a
// round's requests to be answered.
type StormStats struct {
	Size   int           // requests on one key, sent at once
	Rounds int           // rounds run, each on a new key
	P50    time.Duration // median time to answer a whole round
	Max    time.Duration // the slowest round
	rounds []time.Duration
}

func (s *StormStats) summarize() {
	l := percentiles(s.rounds)
	s.Rounds, s.P50, s.Max = len(s.rounds), l.P50, l.Max
}
