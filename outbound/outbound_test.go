package outbound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

var body = []byte(`{"id":"evt_1","object":"event","type":"payment.succeeded","created":1,"data":{"object":{"id":"pay_1"}}}`)

// receiver is a merchant's endpoint that checks every delivery with the
// Standard Webhooks reference library, under each secret it knows.
type receiver struct {
	*httptest.Server
	secrets []string
	got     atomic.Int32    // deliveries received
	valid   [2]atomic.Int32 // deliveries each secret verified
	header  atomic.Pointer[http.Header]
}

func newReceiver(t *testing.T, secrets ...string) *receiver {
	r := &receiver{secrets: secrets}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.got.Add(1)
		b, _ := io.ReadAll(req.Body)
		h := req.Header.Clone()
		r.header.Store(&h)
		ok := false
		for i, secret := range r.secrets {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Error(err)
				continue
			}
			if err := wh.Verify(b, req.Header); err == nil {
				r.valid[i].Add(1)
				ok = true
			}
		}
		if !ok {
			http.Error(w, "bad signature", http.StatusBadRequest)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// A delivery carries the event id as webhook-id and a signature the
// reference library verifies; a rotated endpoint's carries the old
// secret's too, until the old one's time is up.
func TestSignatureVerifiedByTheReferenceLibrary(t *testing.T) {
	now := time.Now()
	old, current := payment.NewEndpointSecret(), payment.NewEndpointSecret()
	r := newReceiver(t, current, old)
	c := outbound.New(outbound.Options{AllowInsecure: true})
	ep := payment.Endpoint{URL: r.URL + "/hook", Secret: current}
	status, err := c.Send(context.Background(), ep, "evt_1", body, now)
	if status != 200 || err != nil {
		t.Fatalf("Send = %d, %v, want 200 from a receiver that verified it", status, err)
	}
	h := *r.header.Load()
	if h.Get("webhook-id") != "evt_1" || h.Get("webhook-timestamp") != strconv.FormatInt(now.Unix(), 10) || h.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v, want webhook-id evt_1, webhook-timestamp %d, JSON", h, now.Unix())
	}
	if got := r.valid[0].Load(); got != 1 {
		t.Errorf("deliveries the reference library verified = %d, want 1", got)
	}

	rotated := payment.Endpoint{URL: r.URL, Secret: current, PreviousSecret: old, PreviousUntil: now.Add(time.Hour)}
	if status, err := c.Send(context.Background(), rotated, "evt_2", body, now); status != 200 || err != nil {
		t.Fatalf("Send while rotating = %d, %v", status, err)
	}
	if r.valid[0].Load() != 2 || r.valid[1].Load() != 1 {
		t.Errorf("verified by the new secret %d, the old %d, want 2 and 1: both sign while the old one is honoured", r.valid[0].Load(), r.valid[1].Load())
	}
	rotated.PreviousUntil = now
	if status, err := c.Send(context.Background(), rotated, "evt_3", body, now); status != 200 || err != nil {
		t.Fatalf("Send after the rotation = %d, %v", status, err)
	}
	if r.valid[1].Load() != 1 {
		t.Errorf("the old secret verified %d, want still 1: past its time it signs no more", r.valid[1].Load())
	}

	// A signature over other bytes, or another secret, does not verify.
	wh, _ := standardwebhooks.NewWebhook(payment.NewEndpointSecret())
	sig, err := outbound.Signature([]string{current}, "evt_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{"Webhook-Id": {"evt_1"}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}, "Webhook-Signature": {sig}}
	if err := wh.Verify(body, hdr); err == nil {
		t.Error("another secret verified the signature")
	}
	mine, _ := standardwebhooks.NewWebhook(current)
	if err := mine.Verify(append([]byte(" "), body...), hdr); err == nil {
		t.Error("the signature verified other bytes")
	}
	if _, err := outbound.Signature([]string{"not-a-secret"}, "evt_1", now, body); err == nil {
		t.Error("Signature with a secret that is not whsec_ base64: no error")
	}
}

// Without AllowInsecure a delivery goes only to https and to a public
// address: a loopback server is never reached, by address or by a name
// that resolves to it, nor is http.
func TestOnlyPublicHTTPS(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(plain.Close)
	c := outbound.New(outbound.Options{})
	secret := payment.NewEndpointSecret()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, u := range []string{srv.URL, "https://localhost" + port + "/hook", "https://[::1]" + port, plain.URL} {
		status, err := c.Send(context.Background(), payment.Endpoint{URL: u, Secret: secret}, "evt_1", body, time.Now())
		if status != 0 || err == nil || !strings.HasPrefix(err.Error(), "refused: ") {
			t.Errorf("Send to %s = %d, %v, want refused", u, status, err)
		}
		var refused *outbound.RefusedError
		if strings.HasPrefix(u, "https://") && !strings.Contains(u, "[::1]") && !errors.As(err, &refused) {
			t.Errorf("Send to %s: %v, want a RefusedError from the dialer", u, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback servers got %d requests, want none", n)
	}
}

// What counts as public.
func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.215.14": true, "8.8.8.8": true, "2606:4700:4700::1111": true, "1.1.1.1": true,
		"127.0.0.1": false, "127.8.8.8": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00:ec2::254": false, "fc00::1": false, "100.64.0.1": false,
		"100.100.100.200": false, "0.0.0.0": false, "::": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
		"224.0.0.1": false, "ff02::1": false, "255.255.255.255": false, "64:ff9b::a00:1": false, "192.0.2.1": false,
	} {
		if got := outbound.Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A redirect is an answer, not followed: the delivery fails and its
// target is never reached.
func TestRedirectNotFollowed(t *testing.T) {
	var reached atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	c := outbound.New(outbound.Options{AllowInsecure: true})
	status, err := c.Send(context.Background(), payment.Endpoint{URL: redirect.URL, Secret: payment.NewEndpointSecret()}, "evt_1", body, time.Now())
	if status != http.StatusTemporaryRedirect || err == nil || !strings.Contains(err.Error(), "not followed") {
		t.Errorf("Send to a redirect = %d, %v, want 307 and an error", status, err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests, want none", n)
	}
}

// No more than MaxAnswerBytes of an answer is read, however much the
// endpoint sends, and the error quotes a short part of it; a try ends
// with its context.
func TestAnswerBoundedAndTryTimed(t *testing.T) {
	var written atomic.Int64
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 1600 { // 100 MiB
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(huge.Close)
	c := outbound.New(outbound.Options{AllowInsecure: true})
	ep := payment.Endpoint{URL: huge.URL, Secret: payment.NewEndpointSecret()}
	status, err := c.Send(context.Background(), ep, "evt_1", body, time.Now())
	if status != 500 || err == nil || len(err.Error()) > 300 {
		t.Errorf("Send = %d, %.80v (%d bytes), want 500 and a short error", status, err, len(err.Error()))
	}
	huge.CloseClientConnections()
	time.Sleep(100 * time.Millisecond)
	if n := written.Load(); n > 32<<20 {
		t.Errorf("the endpoint wrote %d bytes before the client hung up, want far less than its 100 MiB", n)
	}

	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	t.Cleanup(func() { close(block); slow.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if status, err := c.Send(ctx, payment.Endpoint{URL: slow.URL, Secret: ep.Secret}, "evt_1", body, time.Now()); status != 0 || err == nil {
		t.Errorf("Send to an endpoint that never answers = %d, %v, want an error", status, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the try took %s, want it to end with its context", d)
	}
}
