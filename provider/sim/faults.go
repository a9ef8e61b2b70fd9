package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Faults are the simulated provider's failure knobs. The zero value is a
// healthy provider that answers at once. In JSON:
//
//	{"latency":"250ms","fail_before_charge":0,"fail_after_charge":0.5,"fail_lookup":0,"no_dedupe":false,"no_refund_limit":false,
//	 "fail_refund_later":0,"webhook_delay":"0s","webhook_duplicate":0,"webhook_reorder":0}
type Faults struct {
	Latency          time.Duration // waited before every Charge and Lookup
	FailBeforeCharge float64       // probability a Charge fails with nothing charged
	FailAfterCharge  float64       // probability a Charge's response is lost after charging
	FailLookup       float64       // probability a Lookup fails
	// NoDedupe makes every Charge call charge, even under a key that
	// already names a charge: a provider whose dedupe is weaker than
	// promised, or whose key window has passed. Then only oncepay's own
	// claim stands between a retry and a second charge.
	NoDedupe bool
	// NoRefundLimit makes the sim refund whatever it is asked, past what
	// the charge holds: a bank that checks refunds late or not at all (a
	// refund by transfer). Then only the merchant's own reservation stands
	// between two refunds at once and more money out than came in.
	NoRefundLimit bool
	// FailRefundLater is the probability a refund the bank took (and
	// answered as made) is then returned by it: the ledger shows it
	// failed, its amount refundable again, and a refund.failed event
	// follows its refund.succeeded (see FailRefund).
	FailRefundLater float64

	// The webhook knobs, for a sim that sends events (SetWebhook).
	WebhookDelay     time.Duration // each event waits a random time up to this before its first delivery
	WebhookDuplicate float64       // probability each delivery is sent twice at once
	WebhookReorder   float64       // probability an event is held back, so later ones overtake it
}

// maxLatency keeps a fat-fingered knob from hanging every caller for hours.
const maxLatency = time.Minute

// MarshalJSON writes f with the latency as a Go duration string.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Latency          string  `json:"latency"`
		FailBeforeCharge float64 `json:"fail_before_charge"`
		FailAfterCharge  float64 `json:"fail_after_charge"`
		FailLookup       float64 `json:"fail_lookup"`
		NoDedupe         bool    `json:"no_dedupe"`
		NoRefundLimit    bool    `json:"no_refund_limit"`
		FailRefundLater  float64 `json:"fail_refund_later"`
		WebhookDelay     string  `json:"webhook_delay"`
		WebhookDuplicate float64 `json:"webhook_duplicate"`
		WebhookReorder   float64 `json:"webhook_reorder"`
	}{f.Latency.String(), f.FailBeforeCharge, f.FailAfterCharge, f.FailLookup, f.NoDedupe, f.NoRefundLimit, f.FailRefundLater,
		f.WebhookDelay.String(), f.WebhookDuplicate, f.WebhookReorder})
}

// UnmarshalJSON reads the form MarshalJSON writes. The four failure knobs
// are required and unknown fields rejected, so a typo cannot silently leave
// a knob at zero; no_dedupe (absent: the provider dedupes), fail_refund_later
// and the webhook knobs (absent: off), added later, are optional, so older
// clients work.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var v struct {
		Latency          *string  `json:"latency"`
		FailBeforeCharge *float64 `json:"fail_before_charge"`
		FailAfterCharge  *float64 `json:"fail_after_charge"`
		FailLookup       *float64 `json:"fail_lookup"`
		NoDedupe         bool     `json:"no_dedupe"`
		NoRefundLimit    bool     `json:"no_refund_limit"`
		FailRefundLater  float64  `json:"fail_refund_later"`
		WebhookDelay     string   `json:"webhook_delay"`
		WebhookDuplicate float64  `json:"webhook_duplicate"`
		WebhookReorder   float64  `json:"webhook_reorder"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if v.Latency == nil || v.FailBeforeCharge == nil || v.FailAfterCharge == nil || v.FailLookup == nil {
		return errors.New("faults need latency, fail_before_charge, fail_after_charge and fail_lookup")
	}
	latency, err := time.ParseDuration(*v.Latency)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	var delay time.Duration
	if v.WebhookDelay != "" {
		if delay, err = time.ParseDuration(v.WebhookDelay); err != nil {
			return fmt.Errorf("webhook_delay: %w", err)
		}
	}
	*f = Faults{latency, *v.FailBeforeCharge, *v.FailAfterCharge, *v.FailLookup, v.NoDedupe, v.NoRefundLimit, v.FailRefundLater,
		delay, v.WebhookDuplicate, v.WebhookReorder}
	return nil
}

// SetFaults replaces the fault knobs for calls that start from now on. It
// rejects probabilities outside [0, 1] and latency outside [0, 1m], leaving
// the knobs as they were.
func (s *Sim) SetFaults(f Faults) error {
	if f.Latency < 0 || f.Latency > maxLatency {
		return fmt.Errorf("sim: latency %v is outside [0s, %v]", f.Latency, maxLatency)
	}
	if f.WebhookDelay < 0 || f.WebhookDelay > maxLatency {
		return fmt.Errorf("sim: webhook_delay %v is outside [0s, %v]", f.WebhookDelay, maxLatency)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{
		{"fail_before_charge", f.FailBeforeCharge},
		{"fail_after_charge", f.FailAfterCharge},
		{"fail_lookup", f.FailLookup},
		{"fail_refund_later", f.FailRefundLater},
		{"webhook_duplicate", f.WebhookDuplicate},
		{"webhook_reorder", f.WebhookReorder},
	} {
		if !(p.v >= 0 && p.v <= 1) { // written so that NaN fails too
			return fmt.Errorf("sim: %s %v is outside [0, 1]", p.name, p.v)
		}
	}
	s.faults.Store(&f)
	return nil
}

// Faults returns the current fault knobs.
func (s *Sim) Faults() Faults {
	return *s.faults.Load()
}
