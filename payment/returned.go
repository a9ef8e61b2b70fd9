package payment

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// applyRefund applies an event about a refund: its success, or its
// failure, maybe after it succeeded (the bank returned it). A refund in
// progress is settled as a payment is, through confirm. A final one is
// decided by its refund row, which says where it stands now (the attempt
// keeps the answer its client was given); an event that disagrees with it
// is checked with the provider, asked by the refund's key, before
// anything moves: a failure the provider confirms gives the amount back,
// once (FailRefund's guard); one it contradicts is held failed.
func (in *Inbox) applyRefund(ctx context.Context, ev Event) (EventState, string, error) {
	r, err := in.Store.RefundByID(ctx, ev.RefundID)
	if ErrorCode(err) == ENOTFOUND {
		in.Log.Info("event for a refund oncepay does not know; ignored", "provider", ev.Provider, "event_id", ev.ID, "refund_id", ev.RefundID)
		return EventIgnored, "unknown refund", nil
	}
	if err != nil {
		return "", "", err
	}
	// The key's record, while it is kept, ties the event to the refund by
	// its downstream key; after its purge, only the provider's own id of
	// the refund does.
	var a *Attempt
	switch la, err := in.Store.AttemptByPaymentID(ctx, r.ID); {
	case err == nil:
		a = &la.Attempt
	case ErrorCode(err) != ENOTFOUND:
		return "", "", err
	}
	key := ev.DownstreamKey
	switch {
	case a != nil && (a.Kind != KindRefund || RefundDownstreamKey(a.Scope, a.Key) != ev.DownstreamKey),
		a == nil && (r.ProviderRefundID == "" || ev.ProviderRefundID != r.ProviderRefundID),
		r.ProviderRefundID != "" && ev.ProviderRefundID != "" && ev.ProviderRefundID != r.ProviderRefundID:
		in.Log.Info("event for a refund oncepay does not know; ignored", "provider", ev.Provider, "event_id", ev.ID, "refund_id", r.ID,
			"provider_refund_id", r.ProviderRefundID, "event_provider_refund_id", ev.ProviderRefundID)
		return EventIgnored, "unknown refund", nil
	}
	if ev.Provider != in.Endpoint || a != nil && (a.Provider == "" || a.Provider != in.Service.ProviderName) {
		made := "a provider not known"
		if a != nil && a.Provider != "" {
			made = a.Provider
		}
		in.refuse(ev, RefusedOtherProvider, in.Log.Warn, "event from another provider than the refund's; ignored", "refund_id", r.ID)
		return EventIgnored, fmt.Sprintf("not applied: the refund was made through %s, not the provider of the %s endpoint", made, ev.Provider), nil
	}
	final := func(Attempt) (EventState, string, error) { return in.refundFinal(ctx, ev, r.ID, key) }
	if a != nil && a.Status == InProgress {
		// Nothing under the refund's key means nothing was refunded, which
		// a failure says too; a success the provider does not know is held.
		return in.settle(ctx, ev, *a, func(a Attempt) (Outcome, bool) {
			if ev.Kind == EventRefundFailure {
				code := ev.DeclineCode
				if code == "" {
					code = "refund_failed"
				}
				return refundDeclinedOutcome(a, &DeclineError{Code: code, Message: "The provider did not make the refund; nothing was given back."}), true
			}
			return Outcome{}, false
		}, final)
	}
	return final(Attempt{})
}

// refundFinal decides an event about the refund id, settled, by its row
// and, where they disagree, by the provider asked under key.
func (in *Inbox) refundFinal(ctx context.Context, ev Event, id, key string) (EventState, string, error) {
	r, err := in.Store.RefundByID(ctx, id)
	if err != nil {
		return "", "", err
	}
	switch {
	case r.Status == InProgress:
		return "", "", errAttemptBusy
	case ev.Kind == EventRefunded && r.Status == Succeeded, ev.Kind == EventRefundFailure && r.Status == Failed:
		return EventProcessed, "already " + string(r.Status), nil
	}
	p, err := in.Store.PaymentByID(ctx, r.PaymentID)
	if err != nil {
		return "", "", err
	}
	pctx, cancel := context.WithTimeout(ctx, in.Service.ProviderTimeout)
	start := time.Now()
	pr, found, lookupErr := in.Service.Provider.LookupRefund(pctx, RefundLookup{IdempotencyKey: key, ChargeID: p.ChargeID, CreatedAt: r.CreatedAt})
	cancel()
	in.Service.observe("refund_lookup", callResult(found, lookupErr), start)
	d, failed := IsDecline(lookupErr)
	if lookupErr != nil && !failed {
		return "", "", &Error{Code: EUNAVAILABLE, Message: "The provider could not confirm the event: " + lookupErr.Error(), Err: lookupErr}
	}
	says := "holds no refund under its key"
	switch {
	case failed:
		says = "says it failed"
	case found && pr.ID != r.ProviderRefundID:
		says = "holds another refund under its key, " + pr.ID
	case found:
		says = "says it succeeded"
	}
	args := []any{"refund_id", r.ID, "status", r.Status, "provider_refund_id", r.ProviderRefundID, "provider_says", says}
	if ev.Kind == EventRefunded { // about a refund that failed
		if failed || !found {
			in.Log.Info("refund success event about a refund that failed, as the provider says; not applied", append([]any{"provider", ev.Provider, "event_id", ev.ID}, args...)...)
			return EventIgnored, "not applied: the refund failed, and the provider " + says, nil
		}
		in.refuse(ev, RefusedConflict, in.Log.Error, "refund success event about a refund that failed; not applied", args...)
		return "", "", held("flagged for an operator: the refund failed (its client was told so), and the provider %s: money may have moved.", says)
	}
	// A failure of a refund that succeeded.
	if !failed {
		in.refuse(ev, RefusedContradicted, in.Log.Warn, "refund failure event the provider contradicts; not applied", args...)
		return "", "", held("this event says refund %s failed, and the provider, asked by its key, %s. The refund stays succeeded.", r.ID, says)
	}
	code := ev.DeclineCode // the provider's own word, when it gives one
	if d != nil && d.Code != "" {
		code = d.Code
	}
	if code == "" {
		code = "refund_failed"
	}
	now := in.Now()
	ok, err := in.Store.FailRefund(ctx, r.Scope, r.ID, code, RefundFailedEvent(*r, code, now), now)
	if err != nil {
		return "", "", err
	}
	if !ok {
		return EventProcessed, "already failed", nil
	}
	in.Log.Warn("refund failed after it succeeded; its amount is refundable again", "provider", ev.Provider, "event_id", ev.ID,
		"refund_id", r.ID, "payment_id", r.PaymentID, "amount", r.Amount, "currency", r.Currency, "failure_code", code)
	return EventProcessed, fmt.Sprintf("refund failed after it succeeded (%s): %d %s refundable again", code, r.Amount, r.Currency), nil
}

// applyDispute records a dispute as the provider holds it, asked by the
// dispute's id: the event only says which dispute to ask about. Its
// payment is the one the provider names whose charge it disputes.
func (in *Inbox) applyDispute(ctx context.Context, ev Event) (EventState, string, error) {
	if ev.Dispute == nil || ev.Dispute.ID == "" {
		return EventIgnored, "no dispute in the event", nil
	}
	if ev.Provider != in.Endpoint {
		in.refuse(ev, RefusedOtherProvider, in.Log.Warn, "dispute event from another provider than the payments'; ignored")
		return EventIgnored, fmt.Sprintf("not applied: the payments are made through %s, not the provider of the %s endpoint", in.Service.ProviderName, ev.Provider), nil
	}
	looker, ok := in.Service.Provider.(DisputeLooker)
	if !ok {
		return "", "", Errorf(EUNAVAILABLE, "The provider cannot be asked about disputes; the event is not applied.")
	}
	pctx, cancel := context.WithTimeout(ctx, in.Service.ProviderTimeout)
	start := time.Now()
	pd, err := looker.LookupDispute(pctx, ev.Dispute.ID)
	cancel()
	in.Service.observe("dispute_lookup", callResult(err == nil, err), start)
	switch {
	case errors.Is(err, ErrNoDispute):
		in.refuse(ev, RefusedUnconfirmed, in.Log.Warn, "the provider has no such dispute; event not applied", "dispute_id", ev.Dispute.ID)
		return "", "", held("the provider has no dispute %s.", ev.Dispute.ID)
	case err != nil:
		return "", "", &Error{Code: EUNAVAILABLE, Message: "The provider could not confirm the event: " + err.Error(), Err: err}
	}
	p, err := in.Store.PaymentByID(ctx, pd.PaymentID)
	if ErrorCode(err) == ENOTFOUND || err == nil && (p.ChargeID == "" || p.ChargeID != pd.ChargeID) {
		in.Log.Info("dispute of a payment oncepay does not know; ignored", "provider", ev.Provider, "event_id", ev.ID, "dispute_id", pd.ID, "payment_id", pd.PaymentID)
		return EventIgnored, "unknown payment", nil
	}
	if err != nil {
		return "", "", err
	}
	now := in.Now()
	changed, err := in.Store.SetDispute(ctx, p.Scope, p.ID, pd.Dispute, DisputeEvent(*p, pd.Dispute, now), now)
	if err != nil {
		return "", "", err
	}
	if !changed {
		return EventProcessed, "dispute already recorded", nil
	}
	in.Log.Warn("payment disputed", "provider", ev.Provider, "event_id", ev.ID, "payment_id", p.ID, "dispute_id", pd.ID, "status", pd.Status, "reason", pd.Reason)
	return EventProcessed, fmt.Sprintf("dispute %s recorded: %s", pd.ID, pd.Status), nil
}
