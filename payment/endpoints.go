package payment

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Endpoint is where oncepay sends a merchant's events: an HTTPS URL of the
// merchant's, and the secret the deliveries are signed with (Standard
// Webhooks), shown to the merchant once.
type Endpoint struct {
	ID    string // we_...
	Scope string // the merchant
	URL   string
	// Types are the event types sent here; none: every type.
	Types  []EventType
	Secret string // whsec_...: kept as it is, since every delivery is signed with it
	// PreviousSecret, until PreviousUntil, signs deliveries too, beside
	// Secret: a merchant who rotated the secret has that long to deploy it.
	PreviousSecret string
	PreviousUntil  time.Time
	CreatedAt      time.Time
	// FailingSince is when the endpoint's deliveries began to fail, with no
	// success since; zero while they succeed.
	FailingSince   time.Time
	DisabledAt     time.Time // zero while enabled
	DisabledReason string
}

// Enabled reports whether deliveries are made to e.
func (e *Endpoint) Enabled() bool { return e.DisabledAt.IsZero() }

// Wants reports whether e is sent events of type t.
func (e *Endpoint) Wants(t EventType) bool { return len(e.Types) == 0 || slices.Contains(e.Types, t) }

// Secrets are the secrets a delivery at now is signed with: the current
// one, and the previous one while it is still honoured.
func (e *Endpoint) Secrets(now time.Time) []string {
	if e.PreviousSecret != "" && now.Before(e.PreviousUntil) {
		return []string{e.Secret, e.PreviousSecret}
	}
	return []string{e.Secret}
}

// SecretPreviousFor is how long a rotated secret still signs deliveries.
const SecretPreviousFor = 24 * time.Hour

// EndpointSecretPrefix marks an endpoint's signing secret, as Standard
// Webhooks writes them: whsec_ and the base64 of the key.
const EndpointSecretPrefix = "whsec_"

// NewEndpointSecret returns a fresh signing secret: whsec_ and the base64
// of 32 random bytes.
func NewEndpointSecret() string {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand)
	return EndpointSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// MaxEndpointURLLen bounds an endpoint's URL.
const MaxEndpointURLLen = 2048

// NewEndpoint returns a new endpoint of the merchant scope at rawURL, sent
// the events of types (none: all), with a fresh id and secret. The URL must
// be absolute https (http only with insecure, for tests on loopback); that
// it reaches a public address is checked at each delivery, when it is
// resolved.
func NewEndpoint(scope, rawURL string, types []EventType, insecure bool, now time.Time) (Endpoint, error) {
	if err := CheckEndpointURL(rawURL, insecure); err != nil {
		return Endpoint{}, err
	}
	for _, t := range types {
		if !ValidEventType(t) {
			return Endpoint{}, Invalidf("events", "Unknown event type %q: want some of %s.", t, EventTypeNames())
		}
	}
	slices.Sort(types)
	return Endpoint{ID: newID("we_"), Scope: scope, URL: rawURL, Types: slices.Compact(types), Secret: NewEndpointSecret(),
		CreatedAt: now.UTC().Truncate(time.Millisecond)}, nil
}

// CheckEndpointURL checks that rawURL can be an endpoint: absolute, https
// (or http, if insecure), a host, no credentials, no fragment.
func CheckEndpointURL(rawURL string, insecure bool) error {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil || len(rawURL) > MaxEndpointURLLen:
		return Invalidf("url", "The endpoint URL is not a URL of at most %d bytes.", MaxEndpointURLLen)
	case u.Scheme != "https" && !(insecure && u.Scheme == "http"):
		return Invalidf("url", "The endpoint URL must be https:// (http:// only with --allow-insecure-endpoints, for tests).")
	case u.Host == "" || u.Hostname() == "":
		return Invalidf("url", "The endpoint URL has no host.")
	case u.User != nil:
		return Invalidf("url", "The endpoint URL must not hold credentials: every delivery is signed with the endpoint's secret.")
	case u.Fragment != "":
		return Invalidf("url", "The endpoint URL must not have a fragment.")
	}
	return nil
}

// ParseEventTypes reads a comma-separated list of event types ("" for
// all), as the endpoint command takes it.
func ParseEventTypes(s string) ([]EventType, error) {
	var types []EventType
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		t := EventType(name)
		if !ValidEventType(t) {
			return nil, fmt.Errorf("unknown event type %q: want some of %s", name, EventTypeNames())
		}
		types = append(types, t)
	}
	return types, nil
}

// EventTypeNames are every event type, comma-separated.
func EventTypeNames() string {
	names := make([]string, len(EventTypes))
	for i, t := range EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// DeliveryState is where a delivery of an event to an endpoint stands.
type DeliveryState string

const (
	// DeliveryPending: not yet answered 2xx; tried (again) at NextAt.
	DeliveryPending DeliveryState = "pending"
	// DeliveryDelivered: the endpoint answered 2xx; final.
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryFailed: every try of the schedule failed, or the endpoint
	// was disabled; final.
	DeliveryFailed DeliveryState = "failed"
)

// OutboxDelivery is one event on its way to one endpoint: a job whose
// unique key is (event, endpoint), made with the event, in its transaction,
// for every enabled endpoint that wants it; claimed for each try with a
// lease and a fence, as a queued payment is claimed by a forwarder.
type OutboxDelivery struct {
	EventID        string
	EndpointID     string
	Scope          string
	EventType      EventType
	State          DeliveryState
	Fence          int64     // bumped by every claim; guards the try's end
	LeaseExpiresAt time.Time // zero when no deliverer holds it
	Tries          int       // tries begun
	NextAt         time.Time // when the next try is due, while pending
	LastStatus     int       // the HTTP status of the last try; 0 if none came
	LastError      string
	CreatedAt      time.Time // the event's
	UpdatedAt      time.Time
}

// DueDelivery is a delivery due now, with what sending it takes.
type DueDelivery struct {
	OutboxDelivery
	Endpoint Endpoint
	Body     []byte // the event's
}

// DeliveryEnd is how a try of a delivery ended.
type DeliveryEnd struct {
	State     DeliveryState // delivered, pending (tried again at NextAt) or failed
	NextAt    time.Time
	Status    int
	LastError string
}

// DeliveryBacklog is what is still to deliver, for operators.
type DeliveryBacklog struct {
	Pending int
	Oldest  time.Time // the oldest pending delivery's event; zero if none
}

// EndpointStore keeps endpoints and the deliveries of events to them.
type EndpointStore interface {
	// CreateEndpoint stores e; an unknown merchant is an ENOTFOUND error.
	CreateEndpoint(ctx context.Context, e Endpoint) error
	// Endpoints returns scope's endpoints ("" for every merchant's),
	// oldest first.
	Endpoints(ctx context.Context, scope string) ([]Endpoint, error)
	// DisableEndpoint disables the endpoint id, if enabled, and fails its
	// pending deliveries, in one transaction: no event is sent to it
	// again. An unknown or disabled one is an ENOTFOUND error.
	DisableEndpoint(ctx context.Context, id, reason string, now time.Time) error
	// RotateEndpointSecret makes secret the endpoint's, keeping the old one
	// as previous until previousUntil. Unknown: ENOTFOUND.
	RotateEndpointSecret(ctx context.Context, id, secret string, previousUntil time.Time) error
	// DueDeliveries returns up to limit pending deliveries due at now with
	// no live lease, oldest event first, each with its endpoint and body.
	DueDeliveries(ctx context.Context, now time.Time, limit int) ([]DueDelivery, error)
	// ClaimDelivery gives a pending delivery to one deliverer if it is
	// still under fence with no live lease at now: fence+1, a lease until
	// leaseUntil, one more try.
	ClaimDelivery(ctx context.Context, eventID, endpointID string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error)
	// FinishDelivery stores how the try under fence ended, and the
	// endpoint's health with it (a success clears FailingSince, a failure
	// sets it if unset), in one transaction; it returns FailingSince as it
	// stands then. ok is false when fenced out.
	FinishDelivery(ctx context.Context, eventID, endpointID string, fence int64, end DeliveryEnd, now time.Time) (ok bool, failingSince time.Time, err error)
	// RedeliverDelivery starts the delivery of eventID to endpointID over,
	// as an operator asks, whatever it came to (failed, delivered, pending):
	// pending, due at now, no try made, its last answer kept, its fence
	// bumped so that no deliverer acting on what it read before tries it or
	// ends a try; it returns the delivery due, with its endpoint and body,
	// for a deliverer to claim. One transaction. Unknown, or its event
	// purged: ENOTFOUND; its endpoint disabled: EINVALID; held by a
	// deliverer under a live lease: EINPROGRESS.
	RedeliverDelivery(ctx context.Context, eventID, endpointID string, now time.Time) (DueDelivery, error)
	// Deliveries returns the endpoint's last limit deliveries, newest event
	// first, for the admin page.
	Deliveries(ctx context.Context, endpointID string, limit int) ([]OutboxDelivery, error)
	// DeliveryBacklog counts the pending deliveries.
	DeliveryBacklog(ctx context.Context) (DeliveryBacklog, error)
}
