package server

import (
	"container/heap"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// failureLimiter slows down guessing: each client (see clientAddr) may fail
// the admin credential burst times in a row, then once every per, as a token
// bucket of failures. While a client has none left, even the right
// credential is refused, or guesses would still be told apart.
//
// It tracks at most max clients, so a spray of addresses takes bounded
// memory; to make room it forgets the clients with all their tries back,
// then the unlocked client nearest to that, and never one locked out, or
// the spray would give it its tries back.
type failureLimiter struct {
	burst   int
	per     time.Duration
	max     int
	mu      sync.Mutex
	clients map[string]*failureBucket
	order   bucketHeap // the same buckets, the soonest refilled first
}

// failureBucket is a client's failures, as the time they will all have
// come back: each failure puts it one period later. The client is locked
// out while that is more than burst-1 periods away.
type failureBucket struct {
	client   string
	refilled time.Time
	index    int // in the heap
}

// Admin credential failures allowed in a row, and how soon one more is.
const (
	adminFailureBurst = 10
	adminFailureEvery = 6 * time.Second
	maxLimitedClients = 10_000 // bounds the memory a spray of addresses can take
)

func newFailureLimiter(burst int, per time.Duration) *failureLimiter {
	return &failureLimiter{burst: burst, per: per, max: maxLimitedClients, clients: map[string]*failureBucket{}}
}

// wait is how long client must wait before its next try; 0 if it may try now.
//
// A client the table has no room for, every client in it being locked out,
// waits until the first of them is unlocked. That is the cost of never
// forgetting a locked-out client: while an attacker keeps max addresses
// locked out (one failure each every period), an admin from an address not
// yet tracked is refused too. Letting it try uncounted instead would give
// an attacker with more addresses unlimited guesses.
func (l *failureLimiter) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[client]
	if b == nil {
		if len(l.clients) < l.max {
			return 0
		}
		b = l.order[0]
	}
	return max(b.refilled.Sub(now)-time.Duration(l.burst-1)*l.per, 0)
}

// fail counts one failure of client.
func (l *failureLimiter) fail(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[client]
	if b == nil {
		if !l.makeRoom(now) {
			return // wait refuses it until there is room
		}
		b = &failureBucket{client: client, refilled: now}
		l.clients[client] = b
		heap.Push(&l.order, b)
	}
	if b.refilled.Before(now) {
		b.refilled = now
	}
	b.refilled = b.refilled.Add(l.per)
	if full := now.Add(time.Duration(l.burst) * l.per); b.refilled.After(full) {
		b.refilled = full // never more than burst failures owed
	}
	heap.Fix(&l.order, b.index)
}

// makeRoom makes room for one more client, if the table is full: it
// forgets the clients with all their tries back, which are as if never
// seen, and if none is, the one nearest to it, unless even that one is
// locked out. It reports whether there is room.
func (l *failureLimiter) makeRoom(now time.Time) bool {
	if len(l.clients) < l.max {
		return true
	}
	for len(l.order) > 0 && !l.order[0].refilled.After(now) {
		delete(l.clients, heap.Pop(&l.order).(*failureBucket).client)
	}
	if len(l.clients) < l.max {
		return true
	}
	if l.order[0].refilled.Sub(now) > time.Duration(l.burst-1)*l.per {
		return false // every client is locked out
	}
	delete(l.clients, heap.Pop(&l.order).(*failureBucket).client)
	return true
}

// bucketHeap orders buckets by when they are refilled, soonest first: the
// first is the client whose lock-out, if any, ends first.
type bucketHeap []*failureBucket

func (h bucketHeap) Len() int           { return len(h) }
func (h bucketHeap) Less(i, j int) bool { return h[i].refilled.Before(h[j].refilled) }
func (h bucketHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *bucketHeap) Push(x any) {
	b := x.(*failureBucket)
	b.index = len(*h)
	*h = append(*h, b)
}
func (h *bucketHeap) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return b
}

// clientAddr is the client's IP address, as the connection shows it:
// X-Forwarded-For is not trusted, since any client can send it. An IPv6
// client is its /64: one host is commonly given a whole /64, and could
// otherwise take a new address for every few guesses.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}
