// Package outbound sends merchants their events: one signed POST per try,
// as Standard Webhooks specifies (webhook-id, webhook-timestamp,
// webhook-signature), to public HTTPS addresses only. It is the only
// package that speaks to a merchant's endpoint.
//
// An endpoint's URL is the merchant's to choose, so it is checked when it
// is dialed, not when it is stored: the address its name resolves to then
// (a name can resolve elsewhere later) must be public, never loopback,
// private, link-local (the clouds' metadata address among them) or
// otherwise special. Redirects are not followed, and no more of an answer
// is read than its first few KiB.
package outbound

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/oncepay/oncepay/payment"
)

// The headers of a delivery, as Standard Webhooks names them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// MaxAnswerBytes is how much of an endpoint's answer is read: enough to
// say what went wrong, and no endpoint can make a deliverer read more.
const MaxAnswerBytes = 4 << 10

// Options configure a Client.
type Options struct {
	// AllowInsecure lets deliveries go to http:// URLs and to loopback,
	// private and link-local addresses: for tests on one machine, never for
	// merchants on the internet.
	AllowInsecure bool
	// UserAgent names the sender; default "oncepay".
	UserAgent string
}

// Client sends deliveries. It is a payment.Sender.
type Client struct {
	hc   *http.Client
	opts Options
}

var _ payment.Sender = (*Client)(nil)

// New returns a client with its own connections, which checks every
// address it dials unless o.AllowInsecure.
func New(o Options) *Client {
	if o.UserAgent == "" {
		o.UserAgent = "oncepay"
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !o.AllowInsecure {
		d.Control = refuseNonPublic
	}
	tr := &http.Transport{
		Proxy:               nil, // a proxy would dial the endpoint for us, unchecked
		DialContext:         d.DialContext,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{opts: o, hc: &http.Client{Transport: tr,
		// A redirect is an answer, and not a 2xx: the endpoint is where the
		// merchant said, or the delivery fails.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Send posts body, the event eventID's, to ep, signed with ep's secrets at
// at. It returns the status the endpoint answered (0 if none came) and an
// error unless it was a 2xx. ctx bounds the whole try.
func (c *Client) Send(ctx context.Context, ep payment.Endpoint, eventID string, body []byte, at time.Time) (int, error) {
	u, err := url.Parse(ep.URL)
	if err != nil {
		return 0, fmt.Errorf("refused: the endpoint URL does not parse: %w", err)
	}
	if u.Scheme != "https" && !(c.opts.AllowInsecure && u.Scheme == "http") {
		return 0, fmt.Errorf("refused: %s is not https", u.Redacted())
	}
	sig, err := Signature(ep.Secrets(at), eventID, at, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.opts.UserAgent)
	req.Header.Set(HeaderID, eventID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := c.hc.Do(req)
	if err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return 0, refused
		}
		return 0, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, nil
	}
	msg := fmt.Sprintf("answered %d", resp.StatusCode)
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
		msg += " to " + clip(loc, 200) + " (redirects are not followed)"
	}
	if a := clip(string(bytes.TrimSpace(answer)), 200); a != "" {
		msg += ": " + a
	}
	return resp.StatusCode, errors.New(msg)
}

// clip keeps the first n bytes of s that are whole characters.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Signature is the webhook-signature of a delivery of body under id at at:
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" for each secret, the
// first the current one, space-separated.
func Signature(secrets []string, id string, at time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, payment.EndpointSecretPrefix))
		if err != nil || !strings.HasPrefix(secret, payment.EndpointSecretPrefix) {
			return "", errors.New("the endpoint's secret is not whsec_ and base64")
		}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.", id, at.Unix())
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

// RefusedError is a dial refused because its address is not public.
type RefusedError struct{ Addr netip.Addr }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused: %s is not a public address (loopback, private, link-local or special); endpoints must be on the internet", e.Addr)
}

// refuseNonPublic is the dialer's check of the address it is about to
// connect to: after the name was resolved, so whatever the name.
func refuseNonPublic(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if !Public(addr) {
		return &RefusedError{Addr: addr}
	}
	return nil
}

// special are the ranges no endpoint is in, beyond what netip names:
// "this network", shared address space (carrier NAT, and Alibaba's
// metadata address), IETF protocol assignments, documentation, benchmarks,
// reserved, broadcast, NAT64 (which can reach any IPv4 address, private
// ones too), documentation in IPv6.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// Public reports whether addr is an address on the internet: not loopback,
// private (RFC 1918, IPv6 unique local: the clouds' IPv6 metadata
// addresses among them), link-local (169.254.169.254, the IPv4 metadata
// address, among them), multicast, unspecified, nor in special.
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid(), addr.IsLoopback(), addr.IsPrivate(), addr.IsLinkLocalUnicast(), addr.IsLinkLocalMulticast(),
		addr.IsInterfaceLocalMulticast(), addr.IsMulticast(), addr.IsUnspecified():
		return false
	}
	for _, p := range special {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}
