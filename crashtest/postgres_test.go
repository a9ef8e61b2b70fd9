package crashtest

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/pgtest"
)

// shared is the lease arithmetic of the multi-instance tests: the
// provider, which charges every call, must answer well within its timeout
// on a loaded machine. A call that timed out on oncepay's side but charged
// later would be charged again by the retry, which a real provider's
// dedupe by key absorbs and this one, on purpose, does not.
var shared = timing{providerTimeout: 2 * time.Second, lease: 2500 * time.Millisecond, staleAfter: 2500 * time.Millisecond}

// instances are oncepay serve processes on one database, behind a
// round-robin balancer that the clients play themselves.
type instances struct {
	srvs []*child
	urls []string
	rr   atomic.Uint64
}

// next is the instance the next request goes to.
func (in *instances) next() string { return in.urls[in.rr.Add(1)%uint64(len(in.urls))] }

// logCount counts the lines holding s in every instance's logs so far.
func (in *instances) logCount(s string) int {
	n := 0
	for _, srv := range in.srvs {
		n += strings.Count(srv.logs.String(), s)
	}
	return n
}

// load is clients paying intents, each until its final answer, until stop
// is closed; every try goes to base().
type load struct {
	mu      sync.Mutex
	intents []*intent
	tries   retries
	wg      sync.WaitGroup
	stop    chan struct{}
}

func startLoad(t *testing.T, clients int, name string, base func() string, m merchant) *load {
	l := &load{stop: make(chan struct{})}
	c := newClient()
	ctx := t.Context()
	deadline := time.Now().Add(time.Minute)
	for i := range clients {
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				in := newIntent(fmt.Sprintf("%s-client%d-intent%d", name, i, n), 100+rand.IntN(10000), "tok_visa")
				r := payUntilFinal(ctx, t, c, base, m, in, deadline)
				l.mu.Lock()
				l.intents = append(l.intents, in)
				l.tries.add(r)
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.wg.Wait)
	return l
}

// end stops the clients after their current intent and waits for them.
func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// Three oncepay serve processes on one PostgreSQL database and one
// standalone simulated provider that charges every call it gets (so one
// charge a key is oncepay's doing) and loses a tenth of its answers after
// charging. Same-key storms spread over the three; then clients paying
// round-robin while one instance dies at a crash point after charging
// (before recording) now and then and another is SIGKILLed at a random
// moment, each restarted: a retry on another instance takes the abandoned
// claim over. Every instance reconciles and purges on its cron meanwhile.
// After reconcile: one charge a key, the ledger equal to oncepay's books,
// nothing in progress, and every intent replayed byte for byte by every
// instance.
func TestMultiInstancePostgres(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 10*time.Millisecond, "--sim-dedupe=false", "--sim-fail-after-charge", "0.1")
	m := createAPIKey(t, db)
	jobs := []string{"--reconcile-schedule", "@every 1s", "--purge-schedule", "@every 1s"}
	serve := func(env []string, extra ...string) *child {
		return startServe(t, db, sim.url, shared, env, append(jobs, extra...)...)
	}
	in := &instances{srvs: []*child{serve(nil), serve(nil), serve(nil)}}
	for _, s := range in.srvs {
		in.urls = append(in.urls, s.url)
	}
	// restart starts instance i again on its address; srvs keeps every
	// process, for their logs.
	restart := func(i int, env []string) *child {
		s := serve(env, "--addr", strings.TrimPrefix(in.urls[i], "http://"))
		in.srvs = append(in.srvs, s)
		return s
	}

	// Storms: every key sent by 30 clients at once, 10 to each instance.
	const stormKeys, perKey = 10, 30
	storms := make([][]*intent, stormKeys)
	var wg sync.WaitGroup
	c := newClient()
	start := make(chan struct{})
	for k := range storms {
		for j := range perKey {
			one := newIntent(fmt.Sprintf("storm-%d", k), 500+k, "tok_visa")
			storms[k] = append(storms[k], one)
			wg.Go(func() {
				<-start
				url := in.urls[j%len(in.urls)]
				payUntilFinal(t.Context(), t, c, func() string { return url }, m, one, time.Now().Add(30*time.Second))
			})
		}
	}
	close(start)
	wg.Wait()
	var intents []*intent
	for k, same := range storms {
		for _, one := range same[1:] {
			if one.final == nil || same[0].final == nil || !one.final.same(*same[0].final) {
				t.Errorf("storm key %d: final answers differ across instances: %v and %v", k, one.final, same[0].final)
				break
			}
		}
		intents = append(intents, same[0])
	}
	if t.Failed() {
		t.FailNow()
	}

	// Load round-robin. The second instance now runs with a crash point
	// after charging and restarts whenever it dies; the third is SIGKILLed
	// once at a random moment and restarted.
	crashing := crashEnv("after-charge", 0.05)
	in.srvs[1].kill(t)
	crasher := restart(1, crashing)
	l := startLoad(t, 24, "rr", in.next, m)
	crashed, killed := 0, 0
	killAt := time.Now().Add(time.Duration(800+rand.IntN(1200)) * time.Millisecond)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		select {
		case <-crasher.done:
			if !crasher.exit(t, time.Second) {
				t.Fatalf("instance exited with %v, want SIGKILL at its crash point:\n%s", crasher.err, crasher.logs)
			}
			crashed++
			crasher = restart(1, crashing)
		default:
		}
		if killed == 0 && time.Now().After(killAt) {
			in.srvs[2].kill(t)
			killed++
			time.Sleep(300 * time.Millisecond) // its clients get no answer meanwhile and retry elsewhere
			restart(2, nil)
		}
	}
	l.end()
	crasher.cmd.Process.Kill() // if still alive: the checks need an instance with no crash point
	<-crasher.done
	restart(1, nil)
	intents = append(intents, l.intents...)
	takeovers, settled := in.logCount("took over abandoned attempt"), in.logCount("reconcile: settled")

	shared.expired()
	rec := reconcile(t, db, sim.url, shared)
	b := checkBooks(t, db, ledger)
	for _, url := range in.urls {
		// Every instance answers every intent with the bytes of its final answer.
		checkAnswers(t, c, url, m, intents, b)
	}
	if crashed == 0 {
		t.Errorf("the crashing instance never crashed after charging: nothing was taken over from a dead instance")
	}
	t.Logf("3 instances on PostgreSQL: %d storm keys x %d requests, then %d intents round-robin by 24 clients; %d crashes after charging and %d SIGKILL, each restarted; retries: %+v",
		stormKeys, perKey, len(l.intents), crashed, killed, l.tries)
	t.Logf("%d claims taken over by a retry, %d settled by the instances' reconcile; %v; %v", takeovers, settled, rec, b)
}

// The database goes away under load: every connection of oncepay's
// database is terminated and new ones are refused for a while, as during a
// restart or a failover, then it comes back. Meanwhile clients get 503 with
// Retry-After (or 409 in progress), never a 500; afterwards the books agree
// and every intent replays byte for byte.
func TestPostgresDownUnderLoad(t *testing.T) {
	db := pgtest.URL(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	dir := t.TempDir()
	sim, ledger := startSim(t, dir, 10*time.Millisecond, "--sim-dedupe=false")
	m := createAPIKey(t, db)
	in := &instances{}
	for range 2 {
		s := startServe(t, db, sim.url, shared, nil, "--reconcile-schedule", "@every 1s")
		in.srvs, in.urls = append(in.srvs, s), append(in.urls, s.url)
	}
	l := startLoad(t, 16, "down", in.next, m)
	time.Sleep(time.Second)
	pgtest.Admin(t, `ALTER DATABASE `+name+` WITH ALLOW_CONNECTIONS false`)
	pgtest.Admin(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '`+name+`'`)
	time.Sleep(1500 * time.Millisecond)
	pgtest.Admin(t, `ALTER DATABASE `+name+` WITH ALLOW_CONNECTIONS true`)
	time.Sleep(1500 * time.Millisecond)
	l.end()

	// The provider is healthy: every 503 is the database's.
	if l.tries.Unavailable == 0 {
		t.Errorf("no 503 while the database was away: retries %+v", l.tries)
	}
	shared.expired()
	rec := reconcile(t, db, sim.url, shared)
	b := checkBooks(t, db, ledger)
	for _, url := range in.urls {
		checkAnswers(t, newClient(), url, m, l.intents, b)
	}
	t.Logf("database away for 1.5s under load: %d intents by 16 clients on 2 instances; retries %+v",
		len(l.intents), l.tries)
	t.Logf("%v; %v", rec, b)
}
