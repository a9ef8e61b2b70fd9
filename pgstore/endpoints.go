package pgstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// The SQL of sqlitestore/endpoints.go, statement for statement.

var _ payment.EndpointStore = (*DB)(nil)

// CreateEndpoint stores e, if its merchant exists.
func (db *DB) CreateEndpoint(ctx context.Context, e payment.Endpoint) error {
	n, err := db.exec(ctx, `INSERT INTO endpoints (id, scope, url, types, secret, created_at)
		SELECT $1, id, $2, $3, $4, $5 FROM merchants WHERE id = $6`,
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

func scanEndpoint(row pgx.Row) (*payment.Endpoint, error) {
	var (
		e                           payment.Endpoint
		types                       string
		created                     int64
		previous, failing, disabled *int64
	)
	err := row.Scan(&e.ID, &e.Scope, &e.URL, &types, &e.Secret, &e.PreviousSecret, &previous,
		&created, &failing, &disabled, &e.DisabledReason)
	e.Types, e.CreatedAt = splitTypes(types), time.UnixMilli(created).UTC()
	e.PreviousUntil, e.FailingSince, e.DisabledAt = fromMS(previous), fromMS(failing), fromMS(disabled)
	return &e, err
}

// Endpoints returns scope's endpoints ("" for all), oldest first.
func (db *DB) Endpoints(ctx context.Context, scope string) ([]payment.Endpoint, error) {
	return queryAll(ctx, db, scanEndpoint, `SELECT `+endpointColumns+` FROM endpoints e
		WHERE $1 IN ('', e.scope) ORDER BY e.created_at, e.id`, scope)
}

// DisableEndpoint disables an enabled endpoint and fails its pending
// deliveries, in one transaction.
func (db *DB) DisableEndpoint(ctx context.Context, id, reason string, now time.Time) error {
	var n int64
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE endpoints SET disabled_at = $1, disabled_reason = $2
			WHERE id = $3 AND disabled_at IS NULL`, ms(now), reason, id)
		if n = tag.RowsAffected(); err != nil || n == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE deliveries SET state = 'failed', lease_expires_at = NULL,
			last_error = 'the endpoint was disabled', updated_at = $1
			WHERE endpoint_id = $2 AND state = 'pending'`, ms(now), id)
		return err
	})
	if err == nil && n == 0 {
		err = payment.Errorf(payment.ENOTFOUND, "No enabled endpoint %q.", id)
	}
	return mapErr(err)
}

// RotateEndpointSecret makes secret the endpoint's; the old one signs too
// until previousUntil.
func (db *DB) RotateEndpointSecret(ctx context.Context, id, secret string, previousUntil time.Time) error {
	n, err := db.exec(ctx, `UPDATE endpoints SET previous_secret = secret, previous_until = $1, secret = $2
		WHERE id = $3`, ms(previousUntil), secret, id)
	if err == nil && n == 0 {
		err = payment.Errorf(payment.ENOTFOUND, "No endpoint %q.", id)
	}
	return err
}

const deliveryColumns = `d.event_id, d.endpoint_id, d.scope, d.event_type, d.state, d.fence, d.lease_expires_at,
	d.tries, d.next_at, coalesce(d.last_status, 0), coalesce(d.last_error, ''), d.created_at, d.updated_at`

// scanDelivery scans deliveryColumns into d, then extra columns into extra.
func scanDelivery(row pgx.Row, d *payment.OutboxDelivery, extra ...any) error {
	var (
		typ, state             string
		lease                  *int64
		next, created, updated int64
	)
	err := row.Scan(append([]any{&d.EventID, &d.EndpointID, &d.Scope, &typ, &state, &d.Fence, &lease,
		&d.Tries, &next, &d.LastStatus, &d.LastError, &created, &updated}, extra...)...)
	d.EventType, d.State, d.LeaseExpiresAt = payment.EventType(typ), payment.DeliveryState(state), fromMS(lease)
	d.NextAt, d.CreatedAt, d.UpdatedAt = time.UnixMilli(next).UTC(), time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return err
}

// DueDeliveries returns up to limit pending deliveries due at now with no
// live lease, of enabled endpoints, each with its endpoint and body. Every
// instance's deliverer may read the same ones: ClaimDelivery decides.
func (db *DB) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]payment.DueDelivery, error) {
	return queryAll(ctx, db, func(row pgx.Row) (*payment.DueDelivery, error) {
		var (
			dd       payment.DueDelivery
			previous *int64
		)
		ep := &dd.Endpoint
		err := scanDelivery(row, &dd.OutboxDelivery, &dd.Body, &ep.ID, &ep.Scope, &ep.URL, &ep.Secret, &ep.PreviousSecret, &previous)
		ep.PreviousUntil = fromMS(previous)
		return &dd, err
	}, `SELECT `+deliveryColumns+`, ev.body, e.id, e.scope, e.url, e.secret, coalesce(e.previous_secret, ''), e.previous_until
		FROM deliveries d
		JOIN endpoints e ON e.id = d.endpoint_id
		JOIN events ev ON ev.scope = d.scope AND ev.type = d.event_type AND ev.id = d.event_id
		WHERE d.state = 'pending' AND d.next_at <= $1 AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= $1)
		  AND e.disabled_at IS NULL
		ORDER BY d.next_at LIMIT $2`, ms(now), limit)
}

// ClaimDelivery gives a pending delivery to one deliverer, of any
// instance: of two racing for it, exactly one matches the guarded UPDATE.
func (db *DB) ClaimDelivery(ctx context.Context, eventID, endpointID string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.exec(ctx, `UPDATE deliveries
		SET fence = fence + 1, lease_expires_at = $1, tries = tries + 1, updated_at = $2
		WHERE event_id = $3 AND endpoint_id = $4 AND state = 'pending' AND fence = $5
		  AND (lease_expires_at IS NULL OR lease_expires_at <= $2)`,
		ms(leaseUntil), ms(now), eventID, endpointID, fence)
	return fence + 1, n == 1 && err == nil, err
}

// FinishDelivery stores how the try under fence ended, and the endpoint's
// health with it, in one transaction.
func (db *DB) FinishDelivery(ctx context.Context, eventID, endpointID string, fence int64, end payment.DeliveryEnd, now time.Time) (ok bool, failingSince time.Time, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		ok = false
		var status *int32
		if end.Status != 0 {
			v := int32(end.Status)
			status = &v
		}
		tag, err := tx.Exec(ctx, `UPDATE deliveries
			SET state = $1, lease_expires_at = NULL, next_at = $2, last_status = $3, last_error = $4, updated_at = $5
			WHERE event_id = $6 AND endpoint_id = $7 AND state = 'pending' AND fence = $8`,
			string(end.State), ms(nextAt(end, now)), status, nullString(end.LastError), ms(now), eventID, endpointID, fence)
		if err != nil || tag.RowsAffected() == 0 {
			return err // fenced out
		}
		ok = true
		health, args := `UPDATE endpoints SET failing_since = NULL WHERE id = $1 RETURNING failing_since`, []any{endpointID}
		if end.State != payment.DeliveryDelivered {
			health, args = `UPDATE endpoints SET failing_since = coalesce(failing_since, $2) WHERE id = $1 RETURNING failing_since`, []any{endpointID, ms(now)}
		}
		var since *int64
		err = tx.QueryRow(ctx, health, args...).Scan(&since)
		failingSince = fromMS(since)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return ok && err == nil, failingSince, mapErr(err)
}

// RedeliverDelivery starts a delivery over, in one transaction: the
// guarded UPDATE, then the row read back with its endpoint and body, which
// also says why the UPDATE matched nothing.
func (db *DB) RedeliverDelivery(ctx context.Context, eventID, endpointID string, now time.Time) (payment.DueDelivery, error) {
	var dd payment.DueDelivery
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE deliveries
			SET state = 'pending', fence = fence + 1, lease_expires_at = NULL, tries = 0, next_at = $1, updated_at = $1
			WHERE event_id = $2 AND endpoint_id = $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
			  AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = deliveries.endpoint_id AND e.disabled_at IS NULL)`,
			ms(now), eventID, endpointID)
		if err != nil {
			return err
		}
		var previous, disabled *int64
		ep := &dd.Endpoint
		err = scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+`, ev.body, e.id, e.scope, e.url, e.secret,
				coalesce(e.previous_secret, ''), e.previous_until, e.disabled_at
			FROM deliveries d
			JOIN endpoints e ON e.id = d.endpoint_id
			JOIN events ev ON ev.scope = d.scope AND ev.type = d.event_type AND ev.id = d.event_id
			WHERE d.event_id = $1 AND d.endpoint_id = $2`, eventID, endpointID),
			&dd.OutboxDelivery, &dd.Body, &ep.ID, &ep.Scope, &ep.URL, &ep.Secret, &ep.PreviousSecret, &previous, &disabled)
		ep.PreviousUntil, ep.DisabledAt = fromMS(previous), fromMS(disabled)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return payment.Errorf(payment.ENOTFOUND, "No delivery of event %q to endpoint %q.", eventID, endpointID)
		case err != nil:
			return err
		case tag.RowsAffected() == 1:
			return nil
		case !ep.Enabled():
			return payment.Errorf(payment.EINVALID, "Endpoint %s is disabled: nothing is sent there. Add it again once it is fixed.", endpointID)
		}
		return payment.Errorf(payment.EINPROGRESS, "A deliverer is trying this delivery now; see how it ended, then send it again if need be.")
	})
	return dd, mapErr(err)
}

// Deliveries returns the endpoint's last limit deliveries, newest event
// first.
func (db *DB) Deliveries(ctx context.Context, endpointID string, limit int) ([]payment.OutboxDelivery, error) {
	return queryAll(ctx, db, func(row pgx.Row) (*payment.OutboxDelivery, error) {
		var d payment.OutboxDelivery
		return &d, scanDelivery(row, &d)
	}, `SELECT `+deliveryColumns+` FROM deliveries d WHERE d.endpoint_id = $1 ORDER BY d.event_id DESC LIMIT $2`, endpointID, limit)
}

// DeliveryBacklog counts the pending deliveries and finds the oldest.
func (db *DB) DeliveryBacklog(ctx context.Context) (payment.DeliveryBacklog, error) {
	var (
		b      payment.DeliveryBacklog
		oldest *int64
	)
	err := db.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM deliveries WHERE state = 'pending'`).Scan(&b.Pending, &oldest)
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
