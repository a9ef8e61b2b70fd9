-- oncepay's database on PostgreSQL: the tables of ../schema.sql (SQLite)
-- with the same columns and meaning. Applied by the store at every start,
-- under an advisory lock so instances starting together take turns, so
-- every statement is idempotent.
--
-- Times stay Unix milliseconds (BIGINT), as on SQLite: leases, staleness
-- and retention compare the same numbers on both engines, and "oncepay
-- copy" moves rows without converting them. Identifiers sort by bytes
-- (COLLATE "C"), as SQLite's BINARY does, whatever the cluster's locale:
-- the admin page breaks ties of time by id and finds key prefixes by range.

-- One row per (merchant, Idempotency-Key): the claim is the
-- INSERT ... ON CONFLICT DO NOTHING of this primary key, and the final
-- response is stored here for replays.
CREATE TABLE IF NOT EXISTS payment_attempts (
    scope            TEXT COLLATE "C" NOT NULL,  -- the merchant id; "demo" in demo mode
    idempotency_key  TEXT COLLATE "C" NOT NULL,
    id               TEXT COLLATE "C" NOT NULL UNIQUE,  -- public payment id, pay_...
    request_hash     BYTEA   NOT NULL,  -- SHA-256 of the canonical request
    request          BYTEA   NOT NULL,  -- the canonical request (JSON)
    amount           BIGINT  NOT NULL,
    currency         TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'queued', 'expired')),
    fence            BIGINT  NOT NULL,  -- owner generation, bumped by each takeover
    lease_expires_at BIGINT,            -- NULL: no owner holds it
    response_status  INTEGER,           -- NULL until final
    response_body    BYTEA,             -- the exact bytes every replay gets
    charge_id        TEXT COLLATE "C",
    failure_code     TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    kind             TEXT    NOT NULL DEFAULT 'payment' CHECK (kind IN ('payment', 'refund')),
    payment_id       TEXT COLLATE "C",  -- a refund's payment
    details          BYTEA,             -- what the payment or refund keeps (JSON)
    provider         TEXT,              -- the provider the money moves through, as settings binds it; NULL if not known
    PRIMARY KEY (scope, idempotency_key)
);

-- A database made before refunds gains the attempts' kind (the ALTERs do
-- nothing on a current one). Its payments get their rows below.
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'payment' CHECK (kind IN ('payment', 'refund'));
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS payment_id TEXT COLLATE "C";
ALTER TABLE payment_attempts ADD COLUMN IF NOT EXISTS details BYTEA;

-- Reconcile finds in-progress rows untouched for stale-after; purge finds
-- final rows past the retention. Both by (status, updated_at).
CREATE INDEX IF NOT EXISTS payment_attempts_status_updated
    ON payment_attempts (status, updated_at);

-- The admin page lists newest first by created_at (ties, rare, by id): by
-- the time, since ids sort by it only within a kind (every re_ id is above
-- every pay_ id). Without this index every page would read and sort the
-- whole table. A claim inserts at its right edge (created_at is the claim's
-- time), and so does a record, whose new row version (not HOT: status is
-- indexed above) lands seconds behind its claim's: the same few pages. The
-- id is left out, as on SQLite, to keep it small. A database made before it
-- gets it at its next start (a build over the retained attempts, which
-- holds writes off while it runs).
CREATE INDEX IF NOT EXISTS payment_attempts_created
    ON payment_attempts (created_at);

-- Payments outlive their keys: a row per payment, made by its claim and
-- settled by its record, kept for the payment retention (default: always).
-- key_hash is the SHA-256 of its Idempotency-Key, which purge moves to
-- expired_keys. The refundable amount is checked and reserved in one
-- guarded UPDATE; the CHECK holds the invariant whatever the code does. No
-- index of key_hash: it would be a random page written by every claim.
CREATE TABLE IF NOT EXISTS payments (
    id              TEXT COLLATE "C" PRIMARY KEY,  -- pay_...
    scope           TEXT COLLATE "C" NOT NULL,
    key_hash        BYTEA   NOT NULL,
    amount          BIGINT  NOT NULL,
    currency        TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'queued', 'expired')),
    charge_id       TEXT COLLATE "C",
    failure_code    TEXT,
    amount_refunded BIGINT  NOT NULL DEFAULT 0,  -- refunds that succeeded
    amount_reserved BIGINT  NOT NULL DEFAULT 0,  -- refunds in progress
    details         BYTEA,                        -- description and metadata (JSON)
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    CHECK (amount_refunded >= 0 AND amount_reserved >= 0 AND amount_refunded + amount_reserved <= amount)
);

-- The cardholder's dispute the provider told of (NULL: none). Added after
-- the first release: a database made before gets the columns here. The
-- payment stays succeeded; a closed dispute (won, lost, warning_closed)
-- is not reopened.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS dispute_id     TEXT COLLATE "C";
ALTER TABLE payments ADD COLUMN IF NOT EXISTS dispute_status TEXT;
ALTER TABLE payments ADD COLUMN IF NOT EXISTS dispute_reason TEXT;
ALTER TABLE payments ADD COLUMN IF NOT EXISTS dispute_amount BIGINT;

-- The payments of a database made before refunds, as sqlitestore's
-- migration makes them (the request without amount, currency and source
-- is the details). Nothing once every payment attempt has its row.
INSERT INTO payments (id, scope, key_hash, amount, currency, status, charge_id, failure_code, details, created_at, updated_at)
    SELECT a.id, a.scope, sha256(convert_to(a.idempotency_key, 'UTF8')), a.amount, a.currency, a.status,
           a.charge_id, a.failure_code,
           convert_to((convert_from(a.request, 'UTF8')::jsonb - 'amount' - 'currency' - 'source')::text, 'UTF8'),
           a.created_at, a.updated_at
    FROM payment_attempts a
    WHERE a.kind = 'payment' AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = a.id)
    ON CONFLICT DO NOTHING;

-- Refunds, kept as long as their payment.
CREATE TABLE IF NOT EXISTS refunds (
    id                 TEXT COLLATE "C" PRIMARY KEY,  -- re_...
    scope              TEXT COLLATE "C" NOT NULL,
    payment_id         TEXT COLLATE "C" NOT NULL REFERENCES payments (id),
    key_hash           BYTEA   NOT NULL,
    amount             BIGINT  NOT NULL CHECK (amount > 0),
    currency           TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')),
    provider_refund_id TEXT COLLATE "C",
    failure_code       TEXT,
    details            BYTEA,                 -- the reason (JSON)
    created_at         BIGINT  NOT NULL,
    updated_at         BIGINT  NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_payment ON refunds (payment_id, created_at);

-- The keys whose record purge deleted while the payment or refund they made
-- is kept, moved here by the trigger below whatever code deletes the record
-- (see schema.sql): a claim reads this primary key to refuse the late retry
-- of an old intent. The foreign key deletes them with their payment, even
-- when one instance purges a refund's key while another purges its payment.
CREATE TABLE IF NOT EXISTS expired_keys (
    scope      TEXT COLLATE "C" NOT NULL,
    key_hash   BYTEA NOT NULL,
    kind       TEXT  NOT NULL CHECK (kind IN ('payment', 'refund')),
    id         TEXT COLLATE "C" NOT NULL,
    payment_id TEXT COLLATE "C" NOT NULL REFERENCES payments (id) ON DELETE CASCADE,
    PRIMARY KEY (scope, key_hash)
);

-- The keys a bench fill expired, staged in a table with no index (fill.go)
-- and moved here once, sorted by the primary key, so each of its pages is
-- written once: by FinishFill, or at the next start after a fill that was
-- stopped. The index by payment and the foreign key are dropped first and
-- made again below, each by one pass of its own: in key order, the index's
-- entries and the key's checks (a lookup and a row lock of the payment,
-- each) would land at random.
DO $$
BEGIN
    IF to_regclass('fill_expired_keys') IS NOT NULL THEN
        DROP INDEX IF EXISTS expired_keys_payment;
        ALTER TABLE expired_keys DROP CONSTRAINT IF EXISTS expired_keys_payment_id_fkey;
        INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
            SELECT scope, key_hash, kind, id, payment_id FROM fill_expired_keys ORDER BY scope, key_hash;
        DROP TABLE fill_expired_keys;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS expired_keys_payment ON expired_keys (payment_id);

-- A database made on the day expired_keys came, before its foreign key;
-- and a bench fill's move, above.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'expired_keys_payment_id_fkey') THEN
        DELETE FROM expired_keys k WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = k.payment_id);
        ALTER TABLE expired_keys ADD CONSTRAINT expired_keys_payment_id_fkey
            FOREIGN KEY (payment_id) REFERENCES payments (id) ON DELETE CASCADE;
    END IF;
END $$;

-- ON CONFLICT: a purge that moved the key itself (a build of the day
-- expired_keys came) is not refused. The trigger is created once: a DROP
-- and CREATE at every start would lock payment_attempts against every
-- claim while it waits for any reader (a pg_dump).
CREATE OR REPLACE FUNCTION payment_attempts_expire() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
        SELECT scope, key_hash, 'payment', id, id FROM payments WHERE id = OLD.id AND OLD.kind = 'payment'
        UNION ALL
        SELECT scope, key_hash, 'refund', id, payment_id FROM refunds WHERE id = OLD.id AND OLD.kind = 'refund'
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'payment_attempts_expire') THEN
        CREATE TRIGGER payment_attempts_expire AFTER DELETE ON payment_attempts
            FOR EACH ROW EXECUTE FUNCTION payment_attempts_expire();
    END IF;
END $$;

-- A database made before expired_keys told a late retry by the unique
-- (scope, key_hash) of payments and refunds: its purged keys move here and
-- those constraints go. Once: the block does nothing when they are gone.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'payments_scope_key_hash_key') THEN
        INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
            SELECT p.scope, p.key_hash, 'payment', p.id, p.id FROM payments p
            WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = p.id)
            UNION ALL
            SELECT r.scope, r.key_hash, 'refund', r.id, r.payment_id FROM refunds r
            WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = r.id);
        ALTER TABLE payments DROP CONSTRAINT payments_scope_key_hash_key;
        ALTER TABLE refunds DROP CONSTRAINT IF EXISTS refunds_scope_key_hash_key;
    END IF;
END $$;

-- Merchants: the scope of payments, kept across API key rotations.
CREATE TABLE IF NOT EXISTS merchants (
    id         TEXT COLLATE "C" PRIMARY KEY,  -- mer_... (key_... if migrated on SQLite)
    name       TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);

-- Merchant API keys, any number per merchant; only a SHA-256 of the secret.
CREATE TABLE IF NOT EXISTS api_keys (
    id          TEXT COLLATE "C" PRIMARY KEY,  -- key_...
    merchant_id TEXT COLLATE "C" NOT NULL REFERENCES merchants (id),
    name        TEXT    NOT NULL,
    secret_hash BYTEA   NOT NULL UNIQUE,
    created_at  BIGINT  NOT NULL,
    revoked_at  BIGINT
);

-- Settings of this database. "provider" names the payment provider its
-- payments went to: asking another one about them would guess.
CREATE TABLE IF NOT EXISTS settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- A database made before attempts recorded their provider: they were made
-- through the provider the database is bound to (the binding does not move
-- while any is in progress). Once: the block does nothing when the column
-- is there.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_schema = current_schema() AND table_name = 'payment_attempts' AND column_name = 'provider') THEN
        ALTER TABLE payment_attempts ADD COLUMN provider TEXT;
        UPDATE payment_attempts SET provider = (SELECT value FROM settings WHERE name = 'provider');
    END IF;
END $$;

-- The inbox of provider events (webhooks), one row per (provider, event id):
-- the INSERT ... ON CONFLICT DO NOTHING of this primary key is the dedupe
-- of redeliveries, and state, fence and lease say who may apply the event,
-- as for attempts. received -> processing -> processed | failed | ignored;
-- failed is tried again (by a redelivery, the sweep or an operator) up to a
-- bound.
CREATE TABLE IF NOT EXISTS webhook_events (
    provider         TEXT COLLATE "C" NOT NULL,  -- "stripe", "sim"
    event_id         TEXT COLLATE "C" NOT NULL,  -- the provider's event id
    type             TEXT    NOT NULL,  -- the provider's event type
    event            BYTEA   NOT NULL,  -- the verified event, as oncepay reads it (JSON)
    payment_id       TEXT COLLATE "C",  -- the attempt it names, if any
    state            TEXT    NOT NULL CHECK (state IN ('received', 'processing', 'processed', 'failed', 'ignored')),
    attempts         INTEGER NOT NULL,  -- processing tries begun
    fence            BIGINT  NOT NULL,  -- bumped by every try; guards its finish
    lease_expires_at BIGINT,            -- set while processing
    result           TEXT,              -- what applying it did
    last_error       TEXT,
    received_at      BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    PRIMARY KEY (provider, event_id)
);

-- The sweep finds stranded events, the admin page lists by state.
CREATE INDEX IF NOT EXISTS webhook_events_state_updated
    ON webhook_events (state, updated_at);

-- A database made before offline payments lets its attempts and payments be
-- queued and expired: the status CHECKs are replaced, NOT VALID, since every
-- row already there holds the stricter one (no scan of the tables).
DO $$
DECLARE t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['payment_attempts', 'payments'] LOOP
        IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = t::regclass AND conname = t || '_status_check'
                   AND pg_get_constraintdef(oid) NOT LIKE '%queued%') THEN
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, t || '_status_check');
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (status IN (%L, %L, %L, %L, %L)) NOT VALID',
                           t, t || '_status_check', 'in_progress', 'succeeded', 'failed', 'queued', 'expired');
        END IF;
    END LOOP;
END $$;

-- Merchants' limits for payments taken while the provider cannot be reached
-- (offline mode); no row: off. Each applies to each currency alone.
CREATE TABLE IF NOT EXISTS offline_limits (
    scope      TEXT COLLATE "C" PRIMARY KEY,
    max_amount BIGINT NOT NULL CHECK (max_amount > 0),
    max_total  BIGINT NOT NULL CHECK (max_total >= max_amount),
    max_age_ms BIGINT NOT NULL CHECK (max_age_ms > 0),
    updated_at BIGINT NOT NULL
);

-- The forward queue, as in schema.sql: a row per queued payment, made with
-- its 202 and deleted with its settlement; fence and lease say which
-- forwarder (of any instance) may call the provider for it.
CREATE TABLE IF NOT EXISTS forward_queue (
    payment_id       TEXT COLLATE "C" PRIMARY KEY REFERENCES payments (id),
    scope            TEXT COLLATE "C" NOT NULL,
    idempotency_key  TEXT COLLATE "C" NOT NULL,
    amount           BIGINT  NOT NULL,
    currency         TEXT    NOT NULL,
    fence            BIGINT  NOT NULL,
    lease_expires_at BIGINT,
    tries            INTEGER NOT NULL,
    reached          BOOLEAN NOT NULL,
    last_error       TEXT,
    queued_at        BIGINT  NOT NULL,
    expires_at       BIGINT  NOT NULL
);
CREATE INDEX IF NOT EXISTS forward_queue_queued ON forward_queue (queued_at);
CREATE INDEX IF NOT EXISTS forward_queue_scope_currency ON forward_queue (scope, currency);

-- GET /v1/payments, as in schema.sql.
CREATE INDEX IF NOT EXISTS payments_scope_id ON payments (scope, id);

-- The outbox, as in schema.sql: a row per state change of a payment or
-- refund, inserted by the statement or transaction that makes the change;
-- its one index the primary key, whose walks (one a type) list a merchant's
-- events.
CREATE TABLE IF NOT EXISTS events (
    scope      TEXT COLLATE "C" NOT NULL,
    type       TEXT COLLATE "C" NOT NULL,
    id         TEXT COLLATE "C" NOT NULL,  -- evt_..., time-ordered
    object_id  TEXT COLLATE "C" NOT NULL,  -- the payment or refund
    created_at BIGINT  NOT NULL,
    body       BYTEA   NOT NULL,           -- the event's JSON
    PRIMARY KEY (scope, type, id)
);

-- Endpoints and their deliveries, as in schema.sql.
CREATE TABLE IF NOT EXISTS endpoints (
    id              TEXT COLLATE "C" PRIMARY KEY,  -- we_...
    scope           TEXT COLLATE "C" NOT NULL REFERENCES merchants (id),
    url             TEXT    NOT NULL,
    types           TEXT    NOT NULL,
    secret          TEXT    NOT NULL,
    previous_secret TEXT,
    previous_until  BIGINT,
    created_at      BIGINT  NOT NULL,
    failing_since   BIGINT,
    disabled_at     BIGINT,
    disabled_reason TEXT
);
CREATE INDEX IF NOT EXISTS endpoints_scope ON endpoints (scope);

CREATE TABLE IF NOT EXISTS deliveries (
    event_id         TEXT COLLATE "C" NOT NULL,
    endpoint_id      TEXT COLLATE "C" NOT NULL REFERENCES endpoints (id),
    scope            TEXT COLLATE "C" NOT NULL,
    event_type       TEXT COLLATE "C" NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    fence            BIGINT  NOT NULL,
    lease_expires_at BIGINT,
    tries            INTEGER NOT NULL,
    next_at          BIGINT  NOT NULL,
    last_status      INTEGER,
    last_error       TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (state, next_at);
CREATE INDEX IF NOT EXISTS deliveries_endpoint ON deliveries (endpoint_id, event_id);

-- An event's deliveries are made with it, whatever writes it. Created
-- once, as payment_attempts_expire is.
CREATE OR REPLACE FUNCTION events_deliver() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deliveries (event_id, endpoint_id, scope, event_type, state, fence, tries, next_at, created_at, updated_at)
        SELECT NEW.id, e.id, NEW.scope, NEW.type, 'pending', 0, 0, NEW.created_at, NEW.created_at, NEW.created_at
        FROM endpoints e
        WHERE e.scope = NEW.scope AND e.disabled_at IS NULL
          AND (e.types = '' OR position(',' || NEW.type || ',' IN ',' || e.types || ',') > 0);
    RETURN NULL;
END $$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'events_deliver') THEN
        CREATE TRIGGER events_deliver AFTER INSERT ON events
            FOR EACH ROW EXECUTE FUNCTION events_deliver();
    END IF;
END $$;

-- Years on one database: no page reads a table that grows with payments
-- whole (server/plans_test.go checks every statement's plan).
-- The admin list filtered by status pages along payment_attempts_status_updated
-- (newest change first), as on SQLite.
-- The inbox's admin page lists newest first.
CREATE INDEX IF NOT EXISTS webhook_events_received
    ON webhook_events (received_at);
-- The purge of merchants' events past the payment retention finds the old
-- ones by time: rows land in time order, so a BRIN index (a few pages,
-- next to nothing per insert) serves it.
CREATE INDEX IF NOT EXISTS events_created_brin ON events USING brin (created_at);
-- So does the purge of payments past their retention (a payment changes
-- after it is made, never before: created_at bounds updated_at).
CREATE INDEX IF NOT EXISTS payments_created_brin ON payments USING brin (created_at);
