package sim

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.DisputeLooker = (*Sim)(nil)

// ErrNoCharge is Dispute's answer for a charge the ledger does not hold.
var ErrNoCharge = errors.New("sim: no such charge")

// Dispute has the cardholder dispute the whole of charge chargeID for
// reason ("fraudulent" if empty): the dispute needs a response until
// CloseDispute, and a charge.dispute.created event is sent.
func (s *Sim) Dispute(ctx context.Context, chargeID, reason string) (payment.ProviderDispute, error) {
	if reason == "" {
		reason = "fraudulent"
	}
	id := "dp_sim_" + strings.ToLower(crand.Text()[:20])
	err := s.writer.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO sim_disputes (id, charge_id, amount, currency, reason, status, created_at)
			SELECT ?, id, amount, currency, ?, 'needs_response', ? FROM sim_charges WHERE id = ? LIMIT 1`,
			id, reason, time.Now().UnixMilli(), chargeID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, ErrNoCharge)
		}
		return nil
	})
	if errors.Is(err, ErrNoCharge) {
		return payment.ProviderDispute{}, ErrNoCharge
	}
	if err != nil {
		return payment.ProviderDispute{}, fmt.Errorf("sim: dispute: %w", err)
	}
	d, err := s.LookupDispute(ctx, id)
	if err == nil {
		s.emitDispute(EventDisputeCreated, d)
	}
	return d, err
}

// CloseDispute closes the dispute id as status, "won" or "lost", and sends
// a charge.dispute.closed event; a dispute closed already is left as it is.
func (s *Sim) CloseDispute(ctx context.Context, id, status string) (payment.ProviderDispute, error) {
	if status != "won" && status != "lost" {
		return payment.ProviderDispute{}, fmt.Errorf("%w: a dispute closes won or lost", ErrInvalidRequest)
	}
	var changed bool
	err := s.writer.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sim_disputes SET status = ? WHERE id = ? AND status NOT IN ('won', 'lost')`, status, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed = n == 1
		return err
	})
	if err != nil {
		return payment.ProviderDispute{}, fmt.Errorf("sim: close dispute: %w", err)
	}
	d, err := s.LookupDispute(ctx, id)
	if err == nil && changed {
		s.emitDispute(EventDisputeClosed, d)
	}
	return d, err
}

// LookupDispute returns the dispute id as the ledger holds it. It
// implements payment.DisputeLooker; the lookup knob fails it too.
func (s *Sim) LookupDispute(ctx context.Context, id string) (payment.ProviderDispute, error) {
	f := s.Faults() // not in the call log, which counts by idempotency key
	if err := sleep(ctx, f.Latency); err != nil {
		return payment.ProviderDispute{}, err
	}
	if roll(f.FailLookup) {
		return payment.ProviderDispute{}, ErrLookupFailed
	}
	var d payment.ProviderDispute
	var paymentID sql.NullString
	err := s.read.QueryRowContext(ctx, `SELECT d.id, d.status, d.reason, d.amount, d.currency, d.charge_id,
		(SELECT payment_id FROM sim_charges c WHERE c.id = d.charge_id LIMIT 1)
		FROM sim_disputes d WHERE d.id = ?`, id).Scan(&d.ID, &d.Status, &d.Reason, &d.Amount, &d.Currency, &d.ChargeID, &paymentID)
	if errors.Is(err, sql.ErrNoRows) {
		return payment.ProviderDispute{}, fmt.Errorf("sim: dispute %s: %w", id, payment.ErrNoDispute)
	}
	if err != nil {
		return payment.ProviderDispute{}, fmt.Errorf("sim: read dispute: %w", err)
	}
	d.PaymentID = paymentID.String
	return d, nil
}
