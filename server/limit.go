package server

import (
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// failureLimiter slows down guessing: each client (by IP address) may fail
// the admin credential burst times in a row, then once every per, as a token
// bucket of failures. While a client has none left, even the right
// credential is refused, or guesses would still be told apart.
type failureLimiter struct {
	burst   float64
	per     time.Duration
	mu      sync.Mutex
	clients map[string]*failureBucket
}

type failureBucket struct {
	left float64 // failures the client may still make
	at   time.Time
}

// Admin credential failures allowed in a row, and how soon one more is.
const (
	adminFailureBurst = 10
	adminFailureEvery = 6 * time.Second
	maxLimitedClients = 10_000 // bounds the memory a spray of addresses can take
)

func newFailureLimiter(burst int, per time.Duration) *failureLimiter {
	return &failureLimiter{burst: float64(burst), per: per, clients: map[string]*failureBucket{}}
}

// wait is how long client must wait before its next try; 0 if it may try now.
func (l *failureLimiter) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(client, now)
	if b == nil || b.left >= 1 {
		return 0
	}
	return time.Duration((1 - b.left) * float64(l.per))
}

// fail counts one failure of client.
func (l *failureLimiter) fail(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(client, now)
	if b == nil {
		if len(l.clients) >= maxLimitedClients {
			l.forgetRefilled(now)
		}
		b = &failureBucket{left: l.burst, at: now}
		l.clients[client] = b
	}
	b.left = max(b.left-1, 0)
}

// refill adds the failures client earned back since it was last seen.
func (l *failureLimiter) refill(client string, now time.Time) *failureBucket {
	b := l.clients[client]
	if b == nil {
		return nil
	}
	if now.After(b.at) {
		b.left = math.Min(l.burst, b.left+float64(now.Sub(b.at))/float64(l.per))
		b.at = now
	}
	return b
}

// forgetRefilled drops the clients back to a full bucket, which are as if
// never seen; if none is, every client, rather than grow without bound.
func (l *failureLimiter) forgetRefilled(now time.Time) {
	for c := range l.clients {
		if b := l.refill(c, now); b.left >= l.burst {
			delete(l.clients, c)
		}
	}
	if len(l.clients) >= maxLimitedClients {
		clear(l.clients)
	}
}

// clientAddr is the client's IP address, as the connection shows it:
// X-Forwarded-For is not trusted, since any client can send it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
