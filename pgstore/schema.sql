-- oncepay's database on PostgreSQL: the tables of ../schema.sql (SQLite)
-- with the same columns and meaning. Applied by the store at every start,
-- under an advisory lock so instances starting together take turns, so
-- every statement is idempotent.
--
-- Times stay Unix milliseconds (BIGINT), as on SQLite: leases, staleness
-- and retention compare the same numbers on both engines, and "oncepay
-- copy" moves rows without converting them. Identifiers sort by bytes
-- (COLLATE "C"), as SQLite's BINARY does, whatever the cluster's locale:
-- the admin page lists by id and finds key prefixes by range.

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
    status           TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')),
    fence            BIGINT  NOT NULL,  -- owner generation, bumped by each takeover
    lease_expires_at BIGINT,            -- NULL: no owner holds it
    response_status  INTEGER,           -- NULL until final
    response_body    BYTEA,             -- the exact bytes every replay gets
    charge_id        TEXT COLLATE "C",
    failure_code     TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);

-- Reconcile finds in-progress rows untouched for stale-after; purge finds
-- final rows past the retention. Both by (status, updated_at).
CREATE INDEX IF NOT EXISTS payment_attempts_status_updated
    ON payment_attempts (status, updated_at);

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
