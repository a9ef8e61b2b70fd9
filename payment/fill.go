package payment

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Fill makes the rows of a large database as oncepay itself would have
// written them over a long history (oncepay bench fill): each payment its
// attempt, answer and event built by the same functions a request uses, so
// a replay of a filled key gets its stored answer byte for byte. Payment i
// (0 <= i < Payments) belongs to Merchants[i % len(Merchants)], was made
// under FillKey(i) with FillRequest(i), and:
//   - the last LiveKeys payments were made within the retention: their
//     keys' records are kept (replays answer them);
//   - the Unpurged payments before them are older than the retention but
//     their records were not purged yet (what the next purge deletes);
//   - every older one's key is in expired_keys, its record purged.
//
// One in 20 payments was declined (402), the others succeeded; one in 10
// that succeeded was refunded in part (a refund, its key and its event).
// One in 10 payments made within the event retention has its provider
// event in the inbox (processed): older ones were purged.
type Fill struct {
	Now       time.Time
	Payments  int
	LiveKeys  int
	Unpurged  int
	Merchants []string // the scopes, in turn
	Retention time.Duration
	Span      time.Duration // how far back the oldest payment is
	Provider  string        // the provider binding ("sim")
}

// Filler is a store oncepay bench fill appends to: Fill stages the keys it
// expires, FinishFill moves them where a claim reads them, and so does the
// next open of the database after a fill that was stopped.
type Filler interface {
	Database
	Fill(ctx context.Context, s *Snapshot) error
	FinishFill(ctx context.Context) error
}

// FillKey is the Idempotency-Key of payment i of a fill.
func FillKey(i int) string { return "fill-" + strconv.Itoa(i) }

// FillRequest is the body payment i of a fill was made with.
func FillRequest(i int) []byte {
	token := "tok_visa"
	if fillDeclined(i) {
		token = "tok_chargeDeclined"
	}
	return fmt.Appendf(nil, `{"amount":%d,"currency":"usd","source":%q,"description":"Order %d","metadata":{"order":"%d"}}`,
		fillAmount(i), token, i, i)
}

func fillAmount(i int) int64  { return 100 + int64(i*7919)%99900 }
func fillDeclined(i int) bool { return i%20 == 7 }
func fillRefunded(i int) bool { return !fillDeclined(i) && i%10 == 3 }

// At is when payment i was made.
func (f *Fill) At(i int) time.Time {
	live := f.Payments - f.LiveKeys
	if i >= live {
		// Not at the retention's very edge: the oldest must still be live
		// when the fill is measured.
		w := f.Retention * 9 / 10
		return f.Now.Add(-w + spread(w, i-live, f.LiveKeys))
	}
	// Older ones are spread evenly over the rest of the span, up to the
	// retention's edge (minus a minute, so their refunds are old too).
	old := f.Span - f.Retention - 2*time.Hour
	return f.Now.Add(-f.Span + spread(old, i, live))
}

// spread is the k-th of n steps across d. The step first: d*k overflows
// int64 nanoseconds from a few hundred payments over two years.
func spread(d time.Duration, k, n int) time.Duration {
	return d / time.Duration(max(n, 1)) * time.Duration(k)
}

// Batch returns the rows of payments [from, to): attempts (kept keys'
// records), payments, refunds, inbox events and outbox events. The keys of
// payments and refunds with no attempt here go to expired_keys (the store's
// Fill writes them).
func (f *Fill) Batch(from, to int) (*Snapshot, error) {
	s := &Snapshot{}
	kept := f.Payments - f.LiveKeys - f.Unpurged
	for i := from; i < to; i++ {
		req, err := ParseRequest(FillRequest(i))
		if err != nil {
			return nil, err
		}
		at := f.At(i).UTC().Truncate(time.Millisecond)
		scope := f.Merchants[i%len(f.Merchants)]
		a := newAttempt(KindPayment, scope, FillKey(i), paymentIDAt(at), req.Canonical(), req.Amount, req.Currency, at, 0)
		a.Details = marshalLine(paymentDetails{Description: req.Description, Metadata: req.Metadata})
		a.Provider = f.Provider
		done := at.Add(300 * time.Millisecond)
		var o Outcome
		if fillDeclined(i) {
			o = declinedOutcome(a, &DeclineError{Code: "card_declined", Message: "Your card was declined."})
		} else {
			o = SucceededOutcome(a, Charge{ID: "ch_" + strconv.FormatInt(at.UnixMicro(), 36) + strconv.Itoa(i)})
		}
		e := changeEvent(a, o, done, eventIDAt(done))
		a.Status, a.ResponseStatus, a.ResponseBody = o.Status, o.ResponseStatus, o.ResponseBody
		a.ChargeID, a.FailureCode, a.LeaseExpiresAt, a.UpdatedAt = o.ChargeID, o.FailureCode, time.Time{}, done
		p := Payment{ID: a.ID, Scope: scope, KeyHash: KeyHash(a.Key), Amount: a.Amount, Currency: a.Currency,
			Status: a.Status, ChargeID: a.ChargeID, FailureCode: a.FailureCode, Details: a.Details,
			CreatedAt: at, UpdatedAt: done}
		s.Outbox = append(s.Outbox, *e)
		if i >= kept {
			s.Attempts = append(s.Attempts, a)
		}
		if i%10 == 0 && at.After(f.Now.Add(-DefaultEventRetention)) {
			s.Events = append(s.Events, InboxEvent{
				Event: Event{Provider: f.Provider, ID: "msg_" + strconv.Itoa(i), Type: "charge.succeeded", Kind: EventSucceeded,
					PaymentID: a.ID, DownstreamKey: DownstreamKey(scope, a.Key),
					Charge: Charge{ID: a.ChargeID, IdempotencyKey: DownstreamKey(scope, a.Key), Amount: a.Amount, Currency: a.Currency, CreatedAt: at}},
				State: EventProcessed, Attempts: 1, Fence: 1, Result: "already " + string(a.Status), ReceivedAt: done, UpdatedAt: done,
			})
			if fillDeclined(i) {
				s.Events[len(s.Events)-1].Type, s.Events[len(s.Events)-1].Kind = "charge.failed", EventFailed
			}
		}
		if fillRefunded(i) {
			r, ra, re := f.refund(i, a, done)
			p.AmountRefunded, p.UpdatedAt = r.Amount, r.UpdatedAt
			s.Refunds = append(s.Refunds, r)
			s.Outbox = append(s.Outbox, *re)
			if i >= kept {
				s.Attempts = append(s.Attempts, ra)
			}
		}
		s.Payments = append(s.Payments, p)
	}
	return s, nil
}

// refund is the refund of half of payment i (attempt a), made a minute
// after it settled at paid, or just before the fill's now if that is later.
func (f *Fill) refund(i int, a Attempt, paid time.Time) (StoredRefund, Attempt, *OutboxEvent) {
	at := paid.Add(time.Minute)
	if at.After(f.Now) {
		at = paid.Add(f.Now.Sub(paid) / 2)
	}
	req, err := ParseRefundRequest(a.ID, FillRefundRequest(i))
	if err != nil {
		panic("payment: fill: " + err.Error()) // a fixed, valid body
	}
	ra := newAttempt(KindRefund, a.Scope, FillKey(i)+"-refund", refundIDAt(at), req.Canonical(), req.Amount, a.Currency, at, 0)
	ra.PaymentID, ra.Details, ra.Provider = a.ID, marshalLine(refundDetails{Reason: req.Reason}), a.Provider
	done := at.Add(200 * time.Millisecond)
	ra.Status, ra.ChargeID = Succeeded, "pyr_"+strconv.FormatInt(at.UnixMicro(), 36)+strconv.Itoa(i)
	body := ra.RefundView().Body()
	o := Outcome{Status: Succeeded, ResponseStatus: 201, ResponseBody: body, ChargeID: ra.ChargeID, view: body}
	ra.ResponseStatus, ra.ResponseBody, ra.LeaseExpiresAt, ra.UpdatedAt = 201, body, time.Time{}, done
	r := StoredRefund{Refund: Refund{ID: ra.ID, Scope: a.Scope, PaymentID: a.ID, Amount: ra.Amount, Currency: ra.Currency,
		Status: Succeeded, ProviderRefundID: ra.ChargeID, Details: ra.Details, CreatedAt: at, UpdatedAt: done},
		KeyHash: KeyHash(ra.Key)}
	return r, ra, changeEvent(ra, o, done, eventIDAt(done))
}

// FillRefundRequest is the body the refund of payment i of a fill was made
// with, if it has one.
func FillRefundRequest(i int) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"reason":"requested_by_customer"}`, fillAmount(i)/2)
}
