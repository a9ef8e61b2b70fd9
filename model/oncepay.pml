/*
 * oncepay's payment protocol as payment/service.go and payment/jobs.go run it
 * today: NCLIENTS clients retry one idempotency key of one merchant, every
 * request is a separate server goroutine, reconcile runs beside them, and the
 * provider dedupes by downstream key and may lose its answer. Every database
 * statement and every provider call is one atomic step. A request (or
 * reconcile) may die after any step that writes or calls the provider; dying
 * right after a read is the same as dying right before it, so this covers a
 * crash between any two steps. A dead owner's lease expires.
 *
 * model_test.go checks it (go test ./model). By hand, in a scratch directory:
 *   spin -a oncepay.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m200000 -N one_charge
 *   spin -a -DMAXFAULTS=1 oncepay.pml && cc -O2 -DNFAIR=3 -o pan pan.c &&
 *     ./pan -a -f -m200000 -N settles       (liveness, under weak fairness)
 *   spin -a -DRECONCILE_GUESSES oncepay.pml  (then as above: a known-bad variant;
 *     spin -t -p -DRECONCILE_GUESSES oncepay.pml replays its trail)
 *
 * Steps and the code they stand for. model_test.go parses this table and
 * fails when a function, statement or text named here is gone from the Go
 * source; every step is tagged [step] in the model below.
 *
 * | step             | Go                              | must contain                                        |
 * |------------------|---------------------------------|-----------------------------------------------------|
 * | read             | payment.(*Service).once         | ans, err := s.Store.Answer(ctx, a.Scope, a.Key)     |
 * | claim            | payment.(*Service).claim        | claimed, err := s.Store.Claim(ctx, &a)              |
 * | claim            | sqlitestore.claimSQL            | INSERT OR IGNORE INTO payment_attempts              |
 * | claim            | sqlitestore.(*DB).Claim         | err != nil || n == 0                                |
 * | re-read          | payment.(*Service).claim        | ans, err := s.Store.Answer(ctx, a.Scope, a.Key)     |
 * | duplicate        | payment.(*Service).duplicate    | case ans.Status != InProgress:                      |
 * | duplicate        | payment.(*Service).duplicate    | case ans.LeaseExpiresAt.After(s.Now()):             |
 * | takeover         | payment.(*Service).duplicate    | s.Store.TakeOver(ctx, cur.Scope, cur.Key, cur.Fence |
 * | takeover         | sqlitestore.takeOverSQL         | SET fence = fence + 1                               |
 * | takeover         | sqlitestore.takeOverSQL         | status = 'in_progress' AND fence = ?                |
 * | takeover         | sqlitestore.takeOverSQL         | (lease_expires_at IS NULL OR lease_expires_at <= ?) |
 * | downstream-key   | payment.(payments).move         | IdempotencyKey: DownstreamKey(a.Scope, a.Key)       |
 * | downstream-key   | payment.DownstreamKey           | h.Write([]byte(key))                                |
 * | lookup-first     | payment.(*Service).own          | o, found, err = op.find(pctx, a)                    |
 * | lookup-first     | payment.(payments).find         | IdempotencyKey: DownstreamKey(a.Scope, a.Key)       |
 * | charge           | payment.(*Service).own          | o, err = op.move(pctx, a)                           |
 * | charge           | payment.(payments).move         | p.s.Provider.Charge(ctx, ChargeRequest{             |
 * | release          | payment.(*Service).own          | s.Store.Release(ctx, a.Scope, a.Key, a.Fence        |
 * | release          | sqlitestore.releaseSQL          | status = 'in_progress' AND fence = ?                |
 * | lease-bound      | payment.(*Service).own          | min(s.ProviderTimeout, a.LeaseExpiresAt.Sub(s.Now() |
 * | lease-bound      | payment.(*Service).own          | case budget <= 0:                                   |
 * | record           | payment.(*Service).own          | s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence |
 * | record           | sqlitestore.recordSQL           | status = 'in_progress' AND fence = ?                |
 * | settled          | payment.(*Service).settled      | cur, err := s.Store.Answer(ctx, a.Scope, a.Key)     |
 * | settled          | payment.(*Service).settled      | if cur.Status == InProgress {                       |
 * | reconcile-stale  | payment.(*Reconciler).RunOnce   | Store.Stale(ctx, now.Add(-r.StaleAfter), now        |
 * | reconcile-take   | payment.(*Service).confirm      | s.Store.TakeOver(ctx, a.Scope, a.Key, a.Fence       |
 * | reconcile-lookup | payment.(*Service).confirm      | s.operation(a.Kind).find(pctx, a)                   |
 * | reconcile-keep   | payment.(*Service).confirm      | s.Store.Release(ctx, a.Scope, a.Key, a.Fence        |
 * | reconcile-record | payment.(*Service).settle       | return s.operation(a.Kind).notCompleted(a), true    |
 * | reconcile-record | payment.(*Service).confirm      | o, found = absent(a)                                |
 * | reconcile-record | payment.(*Service).confirm      | s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence |
 * | provider-dedupe  | sim.(*Sim).Charge               | c = stored // a replay                              |
 * | provider-lookup  | sim.(*Sim).Lookup               | s.byKey(ctx, req.IdempotencyKey)                    |
 *
 * Properties (the ltl blocks at the end; -N picks one; safe is the first
 * three at once):
 *   one_charge        at most one charge per key at the provider.
 *   answers_match     every final answer, and the row, names what the provider
 *                     holds: succeeded names a charge in the ledger, failed
 *                     means the ledger holds none, and no two answers differ.
 *   no_stale_write    only the current owner (the last to claim or take over)
 *                     writes the row's result or lease, and a final row is
 *                     never written again.
 *   settles           [] (in progress -> <> final): a row in progress ends
 *                     final, every client may give up (liveness, weak fairness).
 *   clients_answered  <> (every client has ended): a client that keeps
 *                     retrying gets a final answer (liveness, weak fairness);
 *                     giving up is the only other way out.
 *   reach_*           witnesses that must fail: the model does pay, decline,
 *                     take over and reconcile, so the properties are not vacuous.
 *
 * Known-bad variants, one -D flag each; model_test.go checks spin refutes
 * each of them with a trail:
 *   PER_ATTEMPT_KEY        the downstream key changes with every owner
 *   NO_DEDUPE              the provider charges every request, key or not
 *   RECONCILE_GUESSES      reconcile records "not completed" without asking
 *   RELEASE_NO_FENCE       releaseSQL without AND fence = ?
 *   RECORD_NO_FENCE        recordSQL without AND fence = ?
 *   TAKEOVER_NO_FENCE_BUMP takeOverSQL without SET fence = fence + 1
 *   CLAIM_READ_THEN_INSERT the read decides ownership; the insert replaces
 *   STALL_BEFORE_CHARGE    an owner may stall past its lease before its
 *                          provider call: assumption A1 below dropped
 *   NO_RECONCILE           no reconcile job
 *   TAKEOVER_NULL_LEASE    takeOverSQL without lease_expires_at IS NULL OR
 *
 * Timing, abstracted (serve enforces provider-timeout < lease < stale-after):
 *   A1 An owner's provider calls end within its lease: a lease never expires
 *      between a claim or takeover and the end of that owner's provider calls
 *      (win[] below). After them an owner may stall past its lease, which
 *      costs one of MAXSTALL.
 *   A2 Reconcile touches a row only when no charge request is still on its
 *      way to the provider (stale-after is far longer than a provider call).
 *      A retry may take over while one is (a released lease is free at once).
 *   Staleness is otherwise not modelled: reconcile may take any row in
 *   progress without a live lease, a superset of what Stale returns. A
 *   client told 409 asks again once the row or its lease changed; asking
 *   while nothing changed gets the same 409.
 *   A1 is kept by the code: the provider deadline ends with the owner's
 *   lease, and an owner whose lease ended before its call (paused between
 *   its claim and its call) does not call at all (step lease-bound). Without
 *   that, STALL_BEFORE_CHARGE: the paused owner charges after reconcile
 *   recorded "not completed".
 *
 * Bounds: NCLIENTS clients; MAXCRASH deaths of a request or of reconcile;
 * MAXFAULTS provider faults (answer lost after charging, failure before
 * charging, a request that times out and lands or dies later, a lookup
 * error); MAXSTALL leases expiring under a live owner. Each takeover needs a
 * lease freed by one of those, so the fence stays at most MAXFENCE (an
 * assertion). The defaults below are the two-clients scope; model_test.go
 * also checks three clients with one of each.
 *
 * Not modelled here: refunds (refunds.pml races them on one payment through
 * this same flow), webhooks, purge, more than one key
 * or merchant, a request reusing the key with another body (409, it writes
 * nothing), a provider charge for another amount, the HTTP layer, and the
 * database's own durability (a committed statement is assumed to survive).
 */

#ifndef NCLIENTS
#define NCLIENTS 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 2
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 2
#endif
#ifndef MAXSTALL
#define MAXSTALL 1
#endif
#define MAXFENCE (1 + MAXCRASH + MAXFAULTS + MAXSTALL)
#define REC NCLIENTS /* the reconciler's index in win[] and busy[] */

/* the row's status; NONE: no row */
#define NONE 0
#define INPROG 1
#define SUCC 2
#define FAIL 3

/* lease_expires_at: LIVE in the future, EXPIRED in the past, NOLEASE NULL (released) */
#define LIVE 1
#define EXPIRED 2
#define NOLEASE 3

/* the answer of one provider call */
#define OK 1
#define FOUND 2
#define NOTFOUND 3
#define DECLINED 4
#define UNKNOWN 5

/* what a client does next */
#define CLAIM 6
#define CLAIMED 7
#define REPLAY 8
#define BUSY 9
#define TAKE 10

/* The row of (scope, key) in payment_attempts. */
byte st = NONE;
byte fence = 0;
byte lease = 0;
byte rec_charge = 0; /* charge_id of a succeeded row */
byte holder = 0;     /* ghost: who last claimed or took over */
bool stale_write = false;

/* The provider: charges are numbered 1..ncharges; the ledger holds, for
 * each downstream key, the charge made under it (0: none). */
byte ncharges = 0;
byte ledger[MAXFENCE + 1];
bool card_declines;
byte inflight = 0; /* downstream key of a request still on its way */

/* Ghosts for timing and the budgets. */
bool win[NCLIENTS + 1];  /* between acquiring and the end of its provider calls */
bool busy[NCLIENTS + 1]; /* alive and still holding what it acquired */
byte crashes = 0;
byte faults = 0;
byte stalls = 0;

/* What the clients were told. */
byte nended = 0;
bool told_fail = false;
byte told_ch = 0;
bool told_conflict = false;

#ifdef PER_ATTEMPT_KEY
#define DK(f) (f)
#else
#define DK(f) 1
#endif

#ifdef TAKEOVER_NULL_LEASE
#define LEASE_GONE (lease == EXPIRED)
#else
#define LEASE_GONE (lease == EXPIRED || lease == NOLEASE)
#endif

#ifdef TAKEOVER_NO_FENCE_BUMP
#define BUMP 0
#else
#define BUMP 1
#endif

/* The provider acts on a charge request under key k. */
inline provider_charge(k, c, res) {
	if
	:: card_declines -> res = DECLINED
	:: else ->
#ifdef NO_DEDUPE
		ncharges++; c = ncharges; ledger[k] = c;
#else
		if
		:: ledger[k] != 0 -> c = ledger[k] /* [provider-dedupe] */
		:: else -> ncharges++; c = ncharges; ledger[k] = c
		fi;
#endif
		res = OK
	fi
}

/* [charge] One provider call; it ends the caller's window (A1). */
inline charge_call(me, k, c, res) {
	atomic {
		if
		:: provider_charge(k, c, res)
		:: faults < MAXFAULTS -> faults++; provider_charge(k, c, res); res = UNKNOWN /* answer lost */
		:: faults < MAXFAULTS -> faults++; res = UNKNOWN /* failed before charging */
		:: faults < MAXFAULTS && inflight == 0 -> faults++; inflight = k; res = UNKNOWN /* timed out */
		fi;
		win[me] = false
	}
}

/* [provider-lookup] Lookup by key; an error is a fault. It ends the
 * caller's window unless a charge may follow (more). */
inline lookup_call(me, k, c, res, more) {
	atomic {
		if
		:: ledger[k] != 0 -> c = ledger[k]; res = FOUND
		:: ledger[k] == 0 -> res = NOTFOUND
		:: faults < MAXFAULTS -> faults++; res = UNKNOWN
		fi;
		if
		:: res != NOTFOUND || !more -> win[me] = false
		:: else
		fi
	}
}

/* takeOverSQL, guarded by the fence read before. */
inline takeover(me, readfence, res) {
	atomic {
		if
		:: st == INPROG && fence == readfence && LEASE_GONE ->
			fence = fence + BUMP; lease = LIVE; holder = me;
			win[me] = true; busy[me] = true; res = OK;
			assert(fence <= MAXFENCE)
		:: else -> res = 0
		fi
	}
}

/* recordPaymentSQL (recordSQL, the part it shares with recordRefundSQL, holds the guard). */
inline record(me, myfence, o, c, res) {
	atomic {
		if
#ifdef RECORD_NO_FENCE
		:: st == INPROG ->
#else
		:: st == INPROG && fence == myfence ->
#endif
			stale_write = stale_write || me != holder;
			st = o; rec_charge = c; lease = NOLEASE; res = OK
		:: else -> res = 0
		fi;
		busy[me] = false
	}
}

/* releaseSQL. */
inline release(me, myfence) {
	atomic {
		if
#ifdef RELEASE_NO_FENCE
		:: st == INPROG ->
#else
		:: st == INPROG && fence == myfence ->
#endif
			stale_write = stale_write || me != holder;
			lease = NOLEASE
		:: else
		fi;
		busy[me] = false
	}
}

/* A final answer reaches the client. */
inline answer(o, c) {
	if
	:: o == FAIL -> told_fail = true
	:: o == SUCC ->
		told_conflict = told_conflict || (told_ch != 0 && told_ch != c);
		told_ch = c
	fi;
	nended++
}

/* Service.Pay's read of the row, and what duplicate decides from it; a
 * final row is replayed at once. */
inline read_row(f, c, o, res) {
	if
	:: st == NONE -> res = CLAIM
	:: st == SUCC || st == FAIL -> answer(st, rec_charge); goto done /* replay */
	:: st == INPROG && lease == LIVE -> res = BUSY /* 409 request-in-progress */
	:: st == INPROG && lease != LIVE -> f = fence; res = TAKE
	fi
}

/* A dead owner's lease expires: at once, as nobody can tell the difference
 * but a retry that would have been told 409 and come back. */
inline die(me) {
	win[me] = false; busy[me] = false;
	if
	:: holder == me && lease == LIVE -> lease = EXPIRED
	:: else
	fi
}

/* The request may die right after the step this ends (SIGKILL, power cut):
 * no answer, its window ends, its lease runs out. Only after a step that
 * writes or calls the provider: dying right after a read is dying before it. */
#define GAP \
	if \
	:: skip \
	:: crashes < MAXCRASH -> crashes++; die(me); goto retry \
	fi

/* One client paying with one key, retrying until it gets a final answer or
 * gives up; every pass through retry is a new HTTP request, Service.Pay. */
proctype Client(byte me) {
	byte f;   /* the fence read, then the fence owned */
	byte c;   /* a charge id */
	byte o;   /* the status to record */
	byte res; /* what the last step said */

retry:
	atomic {
		f = 0; c = 0; o = 0; res = 0;
		if
		:: nended++; goto done /* the client gives up */
		:: read_row(f, c, o, res) /* [read] */
		fi
	}
	if
	:: res == CLAIM ->
		atomic { /* [claim] */
			if
#ifdef CLAIM_READ_THEN_INSERT
			:: true -> /* INSERT OR REPLACE, after the read found nothing */
				stale_write = stale_write || st == SUCC || st == FAIL;
				rec_charge = 0;
#else
			:: st == NONE -> /* INSERT OR IGNORE: one row affected */
#endif
				st = INPROG; fence = 1; lease = LIVE;
				holder = me; win[me] = true; busy[me] = true; f = 1;
				GAP;
				goto charge
			:: else -> res = 0
			fi
		}
		atomic { read_row(f, c, o, res) } /* [re-read] */
	:: else
	fi;
	if /* [duplicate] */
	:: res == BUSY -> goto wait
	:: res == TAKE -> skip
	fi;
	atomic { /* [takeover] */
		takeover(me, f, res);
		if
		:: res == OK -> f = f + BUMP; GAP
		:: else -> goto settled
		fi
	}
	lookup_call(me, DK(f), c, res, true); /* [downstream-key] [lookup-first] */
	if
	:: res == NOTFOUND -> skip
	:: else -> goto outcome
	fi;
charge:
	atomic { charge_call(me, DK(f), c, res); GAP }
outcome:
	if
	:: res == UNKNOWN -> release(me, f); goto retry /* [release], 503 */
	:: else
	fi;
	atomic { /* [record] */
		if
		:: res == DECLINED -> o = FAIL; c = 0
		:: res == OK || res == FOUND -> o = SUCC
		fi;
		record(me, f, o, c, res);
		if
		:: res == OK -> GAP; answer(o, c); goto done
		:: else
		fi
	}
settled:
	atomic { /* [settled] */
		f = 0; c = 0; o = 0; res = BUSY;
		if
		:: st == INPROG -> skip /* 409 request-in-progress */
		:: else -> answer(st, rec_charge); goto done
		fi
	}
wait: /* Retry-After: asking again changes nothing while the lease is live */
	atomic { (st != INPROG || lease != LIVE) -> goto retry }
done:
	atomic { f = 0; c = 0; o = 0; res = 0 }
}

/* Reconciler.RunOnce and settle, run again and again by cron. */
#ifndef NO_RECONCILE
active proctype Reconciler() {
	byte f, c, res;
end_idle:
	atomic { st == INPROG && lease != LIVE && inflight == 0 -> f = fence } /* [reconcile-stale], A2 */
	atomic { /* [reconcile-take] */
		takeover(REC, f, res);
		if
		:: res == OK -> f = f + BUMP
		:: else -> goto reset
		fi;
		if
		:: skip
		:: crashes < MAXCRASH -> crashes++; die(REC); goto reset
		fi
	}
#ifdef RECONCILE_GUESSES
	atomic { res = NOTFOUND; win[REC] = false }
#else
	lookup_call(REC, DK(f), c, res, false); /* [reconcile-lookup] */
#endif
	if
	:: res == UNKNOWN -> release(REC, f) /* [reconcile-keep] */
	:: res == FOUND -> record(REC, f, SUCC, c, res) /* [reconcile-record] */
	:: res == NOTFOUND -> record(REC, f, FAIL, 0, res)
	fi;
reset:
	atomic { f = 0; c = 0; res = 0; goto end_idle }
}
#endif

/* A live owner stalls (a pause, a busy database) and its lease runs out;
 * A1: never while it is still in its provider calls [lease-bound]. */
active proctype Clock() {
end:
	do
#ifdef STALL_BEFORE_CHARGE
	:: atomic { lease == LIVE && busy[holder] && stalls < MAXSTALL -> stalls++; lease = EXPIRED }
#else
	:: atomic { lease == LIVE && busy[holder] && !win[holder] && stalls < MAXSTALL -> stalls++; lease = EXPIRED }
#endif
	od
}

/* A charge request that timed out lands at the provider later, or dies. */
active proctype Network() {
	byte c, res;
end:
	do
	:: atomic { inflight != 0 -> provider_charge(inflight, c, res); inflight = 0; c = 0; res = 0 }
	:: atomic { inflight != 0 -> inflight = 0 }
	od
}

init {
	byte i;
	atomic {
		if
		:: card_declines = true
		:: card_declines = false
		fi;
		for (i : 0 .. NCLIENTS - 1) {
			run Client(i)
		}
	}
}

#define ONE_CHARGE (ncharges <= 1)
#define ANSWERS_MATCH \
	(!told_conflict \
	 && (!told_fail || ncharges == 0) \
	 && (told_ch == 0 || (told_ch <= ncharges && told_ch == rec_charge)) \
	 && (st != FAIL || ncharges == 0) \
	 && (st != SUCC || (rec_charge >= 1 && rec_charge <= ncharges)))
#define NO_STALE_WRITE (!stale_write)

ltl one_charge { [] ONE_CHARGE }
ltl answers_match { [] ANSWERS_MATCH }
ltl no_stale_write { [] NO_STALE_WRITE }
/* the three at once: one search for the correct model */
ltl safe { [] (ONE_CHARGE && ANSWERS_MATCH && NO_STALE_WRITE) }

ltl settles { [] (st == INPROG -> <> (st == SUCC || st == FAIL)) }

ltl clients_answered { <> (nended == NCLIENTS) }

/* Witnesses, against a vacuous model: each says a state is never reached
 * that the protocol does reach, so spin must refute every one. */
ltl reach_paid { [] !(told_ch != 0) }
ltl reach_declined { [] !(told_fail && card_declines) }
ltl reach_takeover_paid { [] !(fence >= 2 && holder != REC && st == SUCC) }
ltl reach_reconcile_found { [] !(holder == REC && st == SUCC) }
ltl reach_reconcile_not_completed { [] !(holder == REC && st == FAIL && !card_declines) }
