-- oncepay's database: applied by the store at every start, so every
-- statement is idempotent. Times are Unix milliseconds, UTC.

-- One row per (merchant, Idempotency-Key): the claim is the INSERT OR IGNORE
-- of this primary key, and the final response is stored here for replays.
-- Every operation that moves money (kind: a payment, a refund) claims here,
-- so a merchant's keys are one namespace, as at Stripe. Purged after the
-- retention; the payment or refund it made stays in its own table.
CREATE TABLE IF NOT EXISTS payment_attempts (
    scope            TEXT    NOT NULL,  -- the merchant id; "demo" in demo mode
    idempotency_key  TEXT    NOT NULL,
    id               TEXT    NOT NULL UNIQUE,  -- public payment id, pay_...
    request_hash     BLOB    NOT NULL,  -- SHA-256 of the canonical request
    request          BLOB    NOT NULL,  -- the canonical request (JSON)
    amount           INTEGER NOT NULL,
    currency         TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'queued', 'expired')),
    fence            INTEGER NOT NULL,  -- owner generation, bumped by each takeover
    lease_expires_at INTEGER,           -- NULL: no owner holds it
    response_status  INTEGER,           -- NULL until final
    response_body    BLOB,              -- the exact bytes every replay gets
    charge_id        TEXT,
    failure_code     TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- Added after the first release (migrate.go adds them to older files).
    kind             TEXT    NOT NULL DEFAULT 'payment' CHECK (kind IN ('payment', 'refund')),
    payment_id       TEXT,              -- a refund's payment
    details          BLOB,              -- what the payment or refund keeps (JSON)
    -- The provider the money moves through, as settings binds it, set at
    -- the claim: a provider's event settles only attempts made through it.
    -- NULL if not known (a file migrated before any binding).
    provider         TEXT,
    PRIMARY KEY (scope, idempotency_key)
);

-- Reconcile finds in-progress rows untouched for stale-after; purge finds
-- final rows past the retention. Both by (status, updated_at).
CREATE INDEX IF NOT EXISTS payment_attempts_status_updated
    ON payment_attempts (status, updated_at);

-- The admin page lists newest first by created_at (ties, rare, by id): by
-- the time, since ids sort by it only within a kind (every re_ id is above
-- every pay_ id). Without this index every page would read and sort the
-- whole table. It costs claims little: a claim appends at its right edge
-- (created_at is the claim's time), so a commit of 32 claims writes about
-- 2.6 more pages (measured, on 16.4 for their attempt rows and indexes); a
-- record never touches it (created_at does not change). With the id in it
-- the index was 3.5 times larger and cost 4.2 pages. An older file gets it
-- at its next start, like every statement here.
CREATE INDEX IF NOT EXISTS payment_attempts_created
    ON payment_attempts (created_at);

-- Each more index costs every claim or record a page write: the ones added
-- since are at the end of this file, each with what it serves. The admin
-- page does not search charge ids, which no index serves.

-- Payments outlive their keys: a row per payment, made by its claim and
-- settled by its record, kept for the payment retention (default: always).
-- key_hash is the SHA-256 of its Idempotency-Key, which purge moves to
-- expired_keys. The refundable amount is checked and reserved in one
-- guarded UPDATE; the CHECK holds the invariant whatever the code does.
-- No index but the id's: an index of key_hash would be a random page
-- written by every claim (a third of a payment's write, measured).
CREATE TABLE IF NOT EXISTS payments (
    id              TEXT    PRIMARY KEY,  -- pay_...
    scope           TEXT    NOT NULL,
    key_hash        BLOB    NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'queued', 'expired')),
    charge_id       TEXT,
    failure_code    TEXT,
    amount_refunded INTEGER NOT NULL DEFAULT 0,  -- refunds that succeeded
    amount_reserved INTEGER NOT NULL DEFAULT 0,  -- refunds in progress
    details         BLOB,                         -- description and metadata (JSON)
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    -- The cardholder's dispute the provider told of (NULL: none), added
    -- after the first release (migrate.go adds them to older files). The
    -- payment stays succeeded; a closed dispute (won, lost,
    -- warning_closed) is not reopened.
    dispute_id      TEXT,
    dispute_status  TEXT,
    dispute_reason  TEXT,
    dispute_amount  INTEGER,
    CHECK (amount_refunded >= 0 AND amount_reserved >= 0 AND amount_refunded + amount_reserved <= amount)
);

-- Refunds, kept as long as their payment.
CREATE TABLE IF NOT EXISTS refunds (
    id                 TEXT    PRIMARY KEY,  -- re_...
    scope              TEXT    NOT NULL,
    payment_id         TEXT    NOT NULL REFERENCES payments (id),
    key_hash           BLOB    NOT NULL,
    amount             INTEGER NOT NULL CHECK (amount > 0),
    currency           TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')),
    provider_refund_id TEXT,
    failure_code       TEXT,
    details            BLOB,                 -- the reason (JSON)
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_payment ON refunds (payment_id, created_at);

-- The keys whose record purge deleted while the payment or refund they made
-- is kept. The trigger below moves each key here in the transaction that
-- deletes its record, whatever code deletes it (an older binary's purge
-- too), so a key is in payment_attempts or here, never in neither while its
-- payment lives. The claim's INSERT reads this primary key (NOT EXISTS)
-- and inserts nothing for the late retry of an old intent, which the store
-- then refuses. Deleted with the payment (the payment retention), when the
-- key is forgotten.
CREATE TABLE IF NOT EXISTS expired_keys (
    scope      TEXT NOT NULL,
    key_hash   BLOB NOT NULL,  -- SHA-256 of the Idempotency-Key: the key itself is gone
    kind       TEXT NOT NULL CHECK (kind IN ('payment', 'refund')),
    id         TEXT NOT NULL,  -- the payment or refund it made
    payment_id TEXT NOT NULL REFERENCES payments (id) ON DELETE CASCADE,  -- its payment (a payment's own id)
    PRIMARY KEY (scope, key_hash)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS expired_keys_payment ON expired_keys (payment_id);

-- OR IGNORE: a purge that moved the key itself (a build of the day
-- expired_keys came) is not refused.
CREATE TRIGGER IF NOT EXISTS payment_attempts_expire AFTER DELETE ON payment_attempts
BEGIN
    INSERT OR IGNORE INTO expired_keys (scope, key_hash, kind, id, payment_id)
        SELECT scope, key_hash, 'payment', id, id FROM payments WHERE id = OLD.id AND OLD.kind = 'payment'
        UNION ALL
        SELECT scope, key_hash, 'refund', id, payment_id FROM refunds WHERE id = OLD.id AND OLD.kind = 'refund';
END;

-- A payment's record is one statement: this trigger settles its payment
-- row in it, so no savepoint is needed around a record and a settlement.
-- Setting what the record set makes it harmless to a binary that settles
-- the payment itself (an older one). A refund is settled by the store's
-- own statements (settleRefund): its money moves once, by one of the two.
CREATE TRIGGER IF NOT EXISTS payment_attempts_settle AFTER UPDATE OF status ON payment_attempts
    WHEN NEW.kind = 'payment' AND OLD.status = 'in_progress' AND NEW.status <> 'in_progress'
BEGIN
    UPDATE payments SET status = NEW.status, charge_id = NEW.charge_id,
        failure_code = NEW.failure_code, updated_at = NEW.updated_at
    WHERE id = NEW.id;
END;

-- Merchants: the scope of payments. A merchant keeps its idempotency keys
-- and payments across API key rotations. A merchant made from an API key by
-- the migration of an older database has that key's id as its own, so its
-- payments keep their scope and their downstream keys.
CREATE TABLE IF NOT EXISTS merchants (
    id         TEXT    PRIMARY KEY,  -- mer_... (key_... if migrated)
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

-- Merchant API keys, any number per merchant. Only a SHA-256 of the secret
-- is kept: the secret is 256 random bits, so a fast hash cannot be
-- brute-forced.
CREATE TABLE IF NOT EXISTS api_keys (
    id          TEXT    PRIMARY KEY,  -- key_...
    merchant_id TEXT    NOT NULL REFERENCES merchants (id),
    name        TEXT    NOT NULL,
    secret_hash BLOB    NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

-- Settings of this database. "provider" names the payment provider its
-- payments went to: asking another one about them would guess.
CREATE TABLE IF NOT EXISTS settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The inbox of provider events (webhooks), one row per (provider, event id):
-- the INSERT OR IGNORE of this primary key is the dedupe of redeliveries,
-- and state, fence and lease say who may apply the event, as for attempts.
-- received -> processing -> processed | failed | ignored; failed is tried
-- again (by a redelivery, the sweep or an operator) up to a bound.
CREATE TABLE IF NOT EXISTS webhook_events (
    provider         TEXT    NOT NULL,  -- "stripe", "sim"
    event_id         TEXT    NOT NULL,  -- the provider's event id
    type             TEXT    NOT NULL,  -- the provider's event type
    event            BLOB    NOT NULL,  -- the verified event, as oncepay reads it (JSON)
    payment_id       TEXT,              -- the attempt it names, if any
    state            TEXT    NOT NULL CHECK (state IN ('received', 'processing', 'processed', 'failed', 'ignored')),
    attempts         INTEGER NOT NULL,  -- processing tries begun
    fence            INTEGER NOT NULL,  -- bumped by every try; guards its finish
    lease_expires_at INTEGER,           -- set while processing
    result           TEXT,              -- what applying it did
    last_error       TEXT,
    received_at      INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (provider, event_id)
);

-- The sweep finds stranded events, the admin page lists by state.
CREATE INDEX IF NOT EXISTS webhook_events_state_updated
    ON webhook_events (state, updated_at);

-- Merchants' limits for payments taken while the provider cannot be reached
-- (offline mode), one row per merchant; no row: off. Each limit applies to
-- each currency alone, in minor units.
CREATE TABLE IF NOT EXISTS offline_limits (
    scope      TEXT    PRIMARY KEY,  -- the merchant id
    max_amount INTEGER NOT NULL CHECK (max_amount > 0),       -- one payment
    max_total  INTEGER NOT NULL CHECK (max_total >= max_amount), -- all queued in one currency
    max_age_ms INTEGER NOT NULL CHECK (max_age_ms > 0),       -- how long one may wait
    updated_at INTEGER NOT NULL
);

-- The forward queue: a row per payment answered 202 queued, in the
-- transaction that records that answer, deleted in the transaction that
-- settles it. Its primary key is the payment, so a payment is queued once;
-- fence and lease say which forwarder may call the provider for it, as for
-- attempts. reached: a call may have reached the provider, so every try
-- asks it by key first.
CREATE TABLE IF NOT EXISTS forward_queue (
    payment_id       TEXT    PRIMARY KEY REFERENCES payments (id),
    scope            TEXT    NOT NULL,
    idempotency_key  TEXT    NOT NULL,
    amount           INTEGER NOT NULL,
    currency         TEXT    NOT NULL,
    fence            INTEGER NOT NULL,  -- bumped by every forward claim
    lease_expires_at INTEGER,           -- NULL: no forwarder holds it
    tries            INTEGER NOT NULL,  -- forward claims begun
    reached          INTEGER NOT NULL,  -- 1: a call may have reached the provider
    last_error       TEXT,              -- why the last try left it queued
    queued_at        INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL   -- the payment's creation plus the merchant's max age
);
-- The forwarder takes the oldest first; the limits sum a merchant's currency.
CREATE INDEX IF NOT EXISTS forward_queue_queued ON forward_queue (queued_at);
CREATE INDEX IF NOT EXISTS forward_queue_scope_currency ON forward_queue (scope, currency);

-- GET /v1/payments lists a merchant's payments newest first, a page at a
-- time by id (ids lead with their time): this index serves every page,
-- first or deep, and costs each claim one append to the merchant's end.
CREATE INDEX IF NOT EXISTS payments_scope_id ON payments (scope, id);

-- The outbox: the events oncepay tells merchants, a row per state change of
-- a payment or refund (payment.succeeded, refund.failed, ...), inserted by
-- the write that makes the change (a record, a queueing, a forward's
-- settlement), in its transaction: a change is never committed without its
-- event, nor an event without its change. The body is the domain's, as
-- GET /v1/events and every delivery show it. Kept as long as payments.
--
-- One index, as each costs every new payment a B-tree insert (the type's
-- own index cost a new payment 8% more CPU, measured): the primary key
-- serves a merchant's list of one type, newest first by id, and its list
-- of every type is the merge of the few types' (outbox.go). Rows land in
-- time order, so the table itself is the purge's order.
CREATE TABLE IF NOT EXISTS events (
    scope      TEXT    NOT NULL,  -- the merchant
    type       TEXT    NOT NULL,  -- payment.succeeded, ...
    id         TEXT    NOT NULL,  -- evt_..., time-ordered
    object_id  TEXT    NOT NULL,  -- the payment or refund it is about
    created_at INTEGER NOT NULL,
    body       BLOB    NOT NULL,  -- the event's JSON
    PRIMARY KEY (scope, type, id)
);

-- Where merchants are sent their events (oncepay endpoint add): an https
-- URL of the merchant's and the secret deliveries are signed with
-- (Standard Webhooks), kept as it is since every delivery is signed with
-- it. types: a comma-separated list of the event types sent, '' for all.
-- A rotated secret signs beside the new one until previous_until.
CREATE TABLE IF NOT EXISTS endpoints (
    id              TEXT    PRIMARY KEY,  -- we_...
    scope           TEXT    NOT NULL REFERENCES merchants (id),
    url             TEXT    NOT NULL,
    types           TEXT    NOT NULL,
    secret          TEXT    NOT NULL,     -- whsec_...
    previous_secret TEXT,
    previous_until  INTEGER,
    created_at      INTEGER NOT NULL,
    failing_since   INTEGER,              -- the first failure with no success since; NULL while they succeed
    disabled_at     INTEGER,              -- NULL while enabled
    disabled_reason TEXT
);
CREATE INDEX IF NOT EXISTS endpoints_scope ON endpoints (scope);

-- A delivery per (event, endpoint): a job made by the trigger below, in the
-- transaction that writes the event, for every enabled endpoint of the
-- merchant that wants its type; claimed for each try with a lease and a
-- fence, as the forward queue's payments are. pending -> delivered | failed.
CREATE TABLE IF NOT EXISTS deliveries (
    event_id         TEXT    NOT NULL,
    endpoint_id      TEXT    NOT NULL REFERENCES endpoints (id),
    scope            TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,  -- with scope and event_id, the event's primary key
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    fence            INTEGER NOT NULL,  -- bumped by every claim
    lease_expires_at INTEGER,           -- NULL: no deliverer holds it
    tries            INTEGER NOT NULL,  -- tries begun
    next_at          INTEGER NOT NULL,  -- when the next try is due, while pending
    last_status      INTEGER,           -- the HTTP status of the last try, if one came
    last_error       TEXT,
    created_at       INTEGER NOT NULL,  -- the event's
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (event_id, endpoint_id)
);
-- The deliverer takes the due ones; the admin page lists an endpoint's.
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (state, next_at);
CREATE INDEX IF NOT EXISTS deliveries_endpoint ON deliveries (endpoint_id, event_id);

-- An event's deliveries are made with it, whatever writes it: a merchant
-- with no endpoint costs each event one probe of endpoints_scope.
CREATE TRIGGER IF NOT EXISTS events_deliver AFTER INSERT ON events
BEGIN
    INSERT INTO deliveries (event_id, endpoint_id, scope, event_type, state, fence, tries, next_at, created_at, updated_at)
        SELECT NEW.id, e.id, NEW.scope, NEW.type, 'pending', 0, 0, NEW.created_at, NEW.created_at, NEW.created_at
        FROM endpoints e
        WHERE e.scope = NEW.scope AND e.disabled_at IS NULL
          AND (e.types = '' OR instr(',' || e.types || ',', ',' || NEW.type || ',') > 0);
END;

-- Years on one file: no page reads a table that grows with payments whole
-- (server/plans_test.go checks every statement's plan).
-- The admin list filtered by status pages along payment_attempts_status_updated
-- (newest change first): an index of (status, created_at) for it cost each
-- new payment 24-32% more CPU (BenchmarkClaimRecord's writes, measured).
-- The inbox's admin page lists newest first.
CREATE INDEX IF NOT EXISTS webhook_events_received
    ON webhook_events (received_at);
