package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.EndpointStore = (*DB)(nil)

// CreateEndpoint stores e, if its merchant exists: one INSERT ... SELECT,
// so no read decides.
func (db *DB) CreateEndpoint(ctx context.Context, e payment.Endpoint) error {
	n, err := db.execSQL(ctx, `INSERT INTO endpoints (id, scope, url, types, secret, created_at)
		SELECT ?, id, ?, ?, ?, ? FROM merchants WHERE id = ?`,
		e.ID, e.URL, joinTypes(e.Types), e.Secret, ms(e.CreatedAt), e.Scope)
	if err == nil && n == 0 {
		err = payment.ErrNoMerchant(e.Scope)
	}
	return err
}

func joinTypes(types []payment.EventType) string {
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}

func splitTypes(s string) []payment.EventType {
	var types []payment.EventType
	for t := range strings.SplitSeq(s, ",") {
		if t != "" {
			types = append(types, payment.EventType(t))
		}
	}
	return types
}

const endpointColumns = `e.id, e.scope, e.url, e.types, e.secret, coalesce(e.previous_secret, ''), e.previous_until,
	e.created_at, e.failing_since, e.disabled_at, coalesce(e.disabled_reason, '')`

// scanEndpoint scans endpointColumns into e, then extra columns into extra.
func scanEndpoint(row scanner, e *payment.Endpoint, extra ...any) error {
	var (
		types                       string
		created                     int64
		previous, failing, disabled sql.NullInt64
	)
	err := row.Scan(append([]any{&e.ID, &e.Scope, &e.URL, &types, &e.Secret, &e.PreviousSecret, &previous,
		&created, &failing, &disabled, &e.DisabledReason}, extra...)...)
	e.Types, e.CreatedAt = splitTypes(types), time.UnixMilli(created).UTC()
	e.PreviousUntil, e.FailingSince, e.DisabledAt = fromMS(previous), fromMS(failing), fromMS(disabled)
	return err
}

// Endpoints returns scope's endpoints ("" for all), oldest first.
func (db *DB) Endpoints(ctx context.Context, scope string) ([]payment.Endpoint, error) {
	return queryAll(ctx, db.r, func(row scanner) (*payment.Endpoint, error) {
		var e payment.Endpoint
		return &e, scanEndpoint(row, &e)
	}, `SELECT `+endpointColumns+` FROM endpoints e WHERE ? IN ('', e.scope) ORDER BY e.created_at, e.id`, scope)
}

// DisableEndpoint disables an enabled endpoint and fails its pending
// deliveries, in one transaction.
func (db *DB) DisableEndpoint(ctx context.Context, id, reason string, now time.Time) error {
	var n int64
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE endpoints SET disabled_at = ?, disabled_reason = ?
			WHERE id = ? AND disabled_at IS NULL`, ms(now), reason, id)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE deliveries SET state = 'failed', lease_expires_at = NULL,
			last_error = 'the endpoint was disabled', updated_at = ?
			WHERE endpoint_id = ? AND state = 'pending'`, ms(now), id)
		return err
	})
	if err == nil && n == 0 {
		err = payment.Errorf(payment.ENOTFOUND, "No enabled endpoint %q.", id)
	}
	return err
}

// RotateEndpointSecret makes secret the endpoint's; the old one signs too
// until previousUntil.
func (db *DB) RotateEndpointSecret(ctx context.Context, id, secret string, previousUntil time.Time) error {
	n, err := db.execSQL(ctx, `UPDATE endpoints SET previous_secret = secret, previous_until = ?, secret = ?
		WHERE id = ?`, ms(previousUntil), secret, id)
	if err == nil && n == 0 {
		err = payment.Errorf(payment.ENOTFOUND, "No endpoint %q.", id)
	}
	return err
}

const deliveryColumns = `d.event_id, d.endpoint_id, d.scope, d.event_type, d.state, d.fence, d.lease_expires_at,
	d.tries, d.next_at, coalesce(d.last_status, 0), coalesce(d.last_error, ''), d.created_at, d.updated_at`

// scanDelivery scans deliveryColumns into d, then extra columns into extra.
func scanDelivery(row scanner, d *payment.OutboxDelivery, extra ...any) error {
	var (
		lease                  sql.NullInt64
		next, created, updated int64
	)
	err := row.Scan(append([]any{&d.EventID, &d.EndpointID, &d.Scope, &d.EventType, &d.State, &d.Fence, &lease,
		&d.Tries, &next, &d.LastStatus, &d.LastError, &created, &updated}, extra...)...)
	d.LeaseExpiresAt = fromMS(lease)
	d.NextAt, d.CreatedAt, d.UpdatedAt = time.UnixMilli(next).UTC(), time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return err
}

// DueDeliveries returns up to limit pending deliveries due at now with no
// live lease, of enabled endpoints, each with its endpoint and its event's
// body, by the index of (state, next_at).
func (db *DB) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]payment.DueDelivery, error) {
	return queryAll(ctx, db.r, func(row scanner) (*payment.DueDelivery, error) {
		var (
			dd       payment.DueDelivery
			previous sql.NullInt64
		)
		ep := &dd.Endpoint
		err := scanDelivery(row, &dd.OutboxDelivery, &dd.Body, &ep.ID, &ep.Scope, &ep.URL, &ep.Secret, &ep.PreviousSecret, &previous)
		ep.PreviousUntil = fromMS(previous)
		return &dd, err
	}, `SELECT `+deliveryColumns+`, ev.body, e.id, e.scope, e.url, e.secret, coalesce(e.previous_secret, ''), e.previous_until
		FROM deliveries d
		JOIN endpoints e ON e.id = d.endpoint_id
		JOIN events ev ON ev.scope = d.scope AND ev.type = d.event_type AND ev.id = d.event_id
		WHERE d.state = 'pending' AND d.next_at <= ? AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ?)
		  AND e.disabled_at IS NULL
		ORDER BY d.next_at LIMIT ?`, ms(now), ms(now), limit)
}

// ClaimDelivery gives a pending delivery to one deliverer: of two racing
// for it, exactly one matches the guarded UPDATE.
func (db *DB) ClaimDelivery(ctx context.Context, eventID, endpointID string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.execSQL(ctx, `UPDATE deliveries
		SET fence = fence + 1, lease_expires_at = ?, tries = tries + 1, updated_at = ?
		WHERE event_id = ? AND endpoint_id = ? AND state = 'pending' AND fence = ?
		  AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`,
		ms(leaseUntil), ms(now), eventID, endpointID, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// FinishDelivery stores how the try under fence ended, and the endpoint's
// health with it, in one transaction.
func (db *DB) FinishDelivery(ctx context.Context, eventID, endpointID string, fence int64, end payment.DeliveryEnd, now time.Time) (ok bool, failingSince time.Time, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ok = false
		res, err := tx.ExecContext(ctx, `UPDATE deliveries
			SET state = ?, lease_expires_at = NULL, next_at = ?, last_status = ?, last_error = ?, updated_at = ?
			WHERE event_id = ? AND endpoint_id = ? AND state = 'pending' AND fence = ?`,
			end.State, ms(nextAt(end, now)), nullInt(end.Status), nullString(end.LastError), ms(now), eventID, endpointID, fence)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // fenced out
		}
		ok = true
		health := `UPDATE endpoints SET failing_since = NULL WHERE id = ? RETURNING failing_since`
		args := []any{endpointID}
		if end.State != payment.DeliveryDelivered {
			health = `UPDATE endpoints SET failing_since = coalesce(failing_since, ?) WHERE id = ? RETURNING failing_since`
			args = []any{ms(now), endpointID}
		}
		var since sql.NullInt64
		err = tx.QueryRowContext(ctx, health, args...).Scan(&since)
		failingSince = fromMS(since)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return ok && err == nil, failingSince, err
}

// RedeliverDelivery starts a delivery over, in one transaction: the
// guarded UPDATE, then the row read back with its endpoint and body, which
// also says why the UPDATE matched nothing.
func (db *DB) RedeliverDelivery(ctx context.Context, eventID, endpointID string, now time.Time) (payment.DueDelivery, error) {
	var dd payment.DueDelivery
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE deliveries
			SET state = 'pending', fence = fence + 1, lease_expires_at = NULL, tries = 0, next_at = ?, updated_at = ?
			WHERE event_id = ? AND endpoint_id = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
			  AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = deliveries.endpoint_id AND e.disabled_at IS NULL)`,
			ms(now), ms(now), eventID, endpointID, ms(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		var previous, disabled sql.NullInt64
		ep := &dd.Endpoint
		err = scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+`, ev.body, e.id, e.scope, e.url, e.secret,
				coalesce(e.previous_secret, ''), e.previous_until, e.disabled_at
			FROM deliveries d
			JOIN endpoints e ON e.id = d.endpoint_id
			JOIN events ev ON ev.scope = d.scope AND ev.type = d.event_type AND ev.id = d.event_id
			WHERE d.event_id = ? AND d.endpoint_id = ?`, eventID, endpointID),
			&dd.OutboxDelivery, &dd.Body, &ep.ID, &ep.Scope, &ep.URL, &ep.Secret, &ep.PreviousSecret, &previous, &disabled)
		ep.PreviousUntil, ep.DisabledAt = fromMS(previous), fromMS(disabled)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return payment.Errorf(payment.ENOTFOUND, "No delivery of event %q to endpoint %q.", eventID, endpointID)
		case err != nil:
			return err
		case n == 1:
			return nil
		case !ep.Enabled():
			return payment.Errorf(payment.EINVALID, "Endpoint %s is disabled: nothing is sent there. Add it again once it is fixed.", endpointID)
		}
		return payment.Errorf(payment.EINPROGRESS, "A deliverer is trying this delivery now; see how it ended, then send it again if need be.")
	})
	return dd, err
}

func nullInt(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n != 0} }

// Deliveries returns the endpoint's last limit deliveries, newest event
// first, by the index of (endpoint_id, event_id).
func (db *DB) Deliveries(ctx context.Context, endpointID string, limit int) ([]payment.OutboxDelivery, error) {
	return queryAll(ctx, db.r, func(row scanner) (*payment.OutboxDelivery, error) {
		var d payment.OutboxDelivery
		return &d, scanDelivery(row, &d)
	}, `SELECT `+deliveryColumns+` FROM deliveries d WHERE d.endpoint_id = ? ORDER BY d.event_id DESC LIMIT ?`, endpointID, limit)
}

// DeliveryBacklog counts the pending deliveries and finds the oldest.
func (db *DB) DeliveryBacklog(ctx context.Context) (payment.DeliveryBacklog, error) {
	var (
		b      payment.DeliveryBacklog
		oldest sql.NullInt64
	)
	err := db.r.QueryRowContext(ctx, `SELECT count(*), min(created_at) FROM deliveries WHERE state = 'pending'`).Scan(&b.Pending, &oldest)
	b.Oldest = fromMS(oldest)
	return b, mapErr(err)
}

// nextAt is when a delivery that ended so is next due: never again once
// final, which keeps the time it ended.
func nextAt(end payment.DeliveryEnd, now time.Time) time.Time {
	if end.State == payment.DeliveryPending {
		return end.NextAt
	}
	return now
}
