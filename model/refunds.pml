/*
 * Refunds racing on one payment, as payment/once.go, payment/refunds.go and
 * sqlitestore run them: one succeeded payment of CHARGE units, NREFUNDS
 * clients each retrying its own refund of AMT units under its own key,
 * every request a separate server goroutine, reconcile beside them, and a
 * provider that dedupes refunds by downstream key and may lose its answer.
 * The flow is oncepay.pml's (claim, lease, fence, takeover, lookup first,
 * fenced record and release, reconcile), which refunds share with payments;
 * what is new is the money on the payment row: the claim checks and
 * reserves the amount in one guarded UPDATE, and the record turns the
 * reservation into refunded money or gives it back, in its own transaction.
 * Every database transaction and every provider call is one atomic step; a
 * request (or reconcile) may die after any step that writes or calls the
 * provider; a dead owner's lease expires.
 *
 * The provider here does not cap refunds at the charge (the sim and real
 * providers do): what keeps refunds within the charge must be oncepay's own
 * reservation. It refuses a key's refund for good or never (refuses[],
 * chosen at the start), as the sim's refusals are: a refusal it would take
 * back on a retry of the same key is not modelled. It keeps nothing of a
 * refusal, as the sim; with -DKEEPS_REFUSALS it keeps it under the key, as
 * Stripe keeps a failed refund, and a lookup finds it.
 *
 * model_test.go checks it (go test ./model). By hand, in a scratch directory:
 *   spin -a refunds.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m200000 -N safe
 *   spin -a -DMAXCRASH=1 refunds.pml && cc -O2 -DNFAIR=3 -o pan pan.c &&
 *     ./pan -a -f -m200000 -N reservations_freed   (liveness, weak fairness)
 *   spin -a -DRESERVE_READ_THEN_UPDATE refunds.pml  (then as above: a
 *     known-bad variant; spin -t -p -DRESERVE_READ_THEN_UPDATE refunds.pml
 *     replays its trail)
 *
 * Steps and the code they stand for. model_test.go parses this table and
 * fails when a function, statement or text named here is gone from the Go
 * source; every step is tagged [step] in the model below.
 *
 * | step            | Go                            | must contain                                                    |
 * |-----------------|-------------------------------|-----------------------------------------------------------------|
 * | refund          | payment.(*Service).Refund     | return s.once(ctx, asked(KindRefund, scope, key, canonical)     |
 * | refund          | payment.(*Service).operation  | if k == KindRefund {                                            |
 * | read            | payment.(*Service).once       | ans, err := s.Store.Answer(ctx, a.Scope, a.Key)                 |
 * | claim           | payment.(*Service).claim      | claimed, err := s.Store.Claim(ctx, &a)                          |
 * | claim           | sqlitestore.claimSQL          | INSERT OR IGNORE INTO payment_attempts                          |
 * | reserve         | sqlitestore.(*DB).Claim       | err = createRefund(ctx, tx, &c)                                 |
 * | reserve         | sqlitestore.createRefund      | SET amount_reserved = amount_reserved + ?1                      |
 * | reserve         | sqlitestore.createRefund      | AND amount - amount_refunded - amount_reserved >= ?1            |
 * | refuse          | sqlitestore.createRefund      | return refundRefusal(ctx, tx, a)                                |
 * | refuse          | sqlitestore.(*DB).Claim       | claimed = err == nil                                            |
 * | refuse          | groupcommit.(*Writer).commit  | if batch[0].err = batch[0].fn(ctx, tx); batch[0].err != nil {   |
 * | refuse          | groupcommit.(*Writer).savepoint | w.exec(ctx, tx, w.rollbackTo, `ROLLBACK TO op`)               |
 * | duplicate       | payment.(*Service).duplicate  | case ans.LeaseExpiresAt.After(s.Now()):                         |
 * | takeover        | payment.(*Service).duplicate  | s.Store.TakeOver(ctx, cur.Scope, cur.Key, cur.Fence             |
 * | takeover        | sqlitestore.takeOverSQL       | SET fence = fence + 1                                           |
 * | refund-key      | payment.(refunds).move        | IdempotencyKey: RefundDownstreamKey(a.Scope, a.Key)             |
 * | refund-key      | payment.RefundDownstreamKey   | h.Write([]byte(key))                                            |
 * | lookup-first    | payment.(*Service).own        | o, found, err = op.find(pctx, a)                                |
 * | lookup-first    | payment.(refunds).find        | IdempotencyKey: RefundDownstreamKey(a.Scope, a.Key)             |
 * | refund-call     | payment.(*Service).own        | o, err = op.move(pctx, a)                                       |
 * | refund-call     | payment.(refunds).move        | r.s.Provider.Refund(ctx, ProviderRefundRequest{                 |
 * | refund-call     | payment.(refunds).move        | return refundDeclinedOutcome(a, d) }                            |
 * | refund-call     | payment.(*Service).answered   | return declined(d), true, nil                                   |
 * | release         | payment.(*Service).own        | s.Store.Release(ctx, a.Scope, a.Key, a.Fence                    |
 * | release         | sqlitestore.releaseSQL        | status = 'in_progress' AND fence = ?                            |
 * | record          | payment.(*Service).own        | s.Store.Record(ctx, a.Kind, a.Scope, a.Key, a.Fence             |
 * | record          | sqlitestore.recordSQL         | status = 'in_progress' AND fence = ?                            |
 * | settle-money    | sqlitestore.(*DB).Record      | settleRefund(ctx, tx, id, paymentID, amount, o, now)            |
 * | settle-money    | sqlitestore.settleRefund      | SET amount_reserved = amount_reserved - ?, amount_refunded = amount_refunded + ? |
 * | settle-money    | sqlitestore.settleRefund      | if o.Status == payment.Succeeded {                              |
 * | settled         | payment.(*Service).settled    | if cur.Status == InProgress {                                   |
 * | reconcile-take  | payment.(*Service).confirm    | s.Store.TakeOver(ctx, a.Scope, a.Key, a.Fence                   |
 * | reconcile-look  | payment.(*Service).confirm    | s.operation(a.Kind).find(pctx, a)                               |
 * | reconcile-keep  | payment.(*Service).confirm    | s.Store.Release(ctx, a.Scope, a.Key, a.Fence                    |
 * | reconcile-none  | payment.(refunds).notCompleted | FailureCode: "not_completed"                                   |
 * | reconcile-none  | payment.(*Service).settle     | return s.operation(a.Kind).notCompleted(a), true                |
 * | provider-dedupe | sim.(*Sim).Refund             | WHERE idempotency_key = ? ORDER BY copy LIMIT 1                 |
 * | provider-lookup | sim.(*Sim).LookupRefund       | WHERE idempotency_key = ? ORDER BY copy LIMIT 1                 |
 * | found-declined  | payment.(refunds).find        | if d, declined := IsDecline(err); declined {                    |
 * | found-declined  | payment.(refunds).find        | return refundDeclinedOutcome(a, d), true, nil                   |
 *
 * Properties (the ltl blocks at the end; -N picks one; safe is the first five):
 *   within_charge      the provider's refunded total never exceeds the charge.
 *   one_refund_per_key a refund key makes at most one refund at the provider.
 *   answers_match      every final answer, and every final row, names what
 *                      the provider holds for that key (succeeded: a refund;
 *                      failed: none), and once no refund is in progress
 *                      oncepay's amount_refunded equals the provider's total.
 *   books_balance      amount_reserved is exactly the refunds in progress,
 *                      amount_refunded exactly the succeeded ones, and the
 *                      two together never exceed the charge: nothing is
 *                      promised twice.
 *   refusals_honest    a refund is refused ("exceeds") only when the charge
 *                      minus the refunds succeeded or in progress leaves
 *                      less than it asks. A reservation that outlives its
 *                      refund breaks it, and for ever: nothing else gives
 *                      a reservation back, so every later refund that fits
 *                      is refused too.
 *   reservations_freed <> [] (no refund in progress and nothing reserved):
 *                      every refund ends final and every reservation is
 *                      given back for good, even when every client gives
 *                      up (liveness, weak fairness).
 *   reach_*            witnesses that must fail: the model does refund,
 *                      refuse, decline and then refund another, take over,
 *                      and reconcile both ways, so the properties are not
 *                      vacuous.
 *
 * Known-bad variants, one -D flag each; model_test.go checks spin refutes
 * each of them with a trail:
 *   RESERVE_READ_THEN_UPDATE the refundable amount read in one step and
 *                            reserved in another (a check outside the
 *                            claim's guarded UPDATE)
 *   RECORD_KEEPS_RESERVATION settleRefund without amount_reserved - ? on a
 *                            failed refund: the reservation is never given back
 *   RECORD_NO_FENCE          recordSQL without AND fence = ?
 *   PER_ATTEMPT_KEY          the downstream refund key changes with every owner
 *
 * Timing, as in oncepay.pml: A1 an owner's provider calls end within its
 * lease (win[]); A2 reconcile touches a row only when no refund request is
 * still on its way to the provider. Reconcile may take any refund in
 * progress without a live lease.
 *
 * Bounds: NREFUNDS clients, one key each (two clients on one key are
 * oncepay.pml's); MAXCRASH deaths of a request or of reconcile; MAXFAULTS
 * provider faults (answer lost after refunding, failure before refunding, a
 * request that times out and lands or dies later, a lookup error); MAXSTALL
 * leases expiring under a live owner. The budgets are shared by all keys.
 * CHARGE and AMT are such that one refund fits and two do not. The
 * defaults below are the two-refunds scope; model_test.go also checks two
 * refunds with one crash and two faults at a provider that keeps refusals
 * (KEEPS_REFUSALS), three refunds with one crash, no fault and one stall,
 * and the liveness property with one of each.
 *
 * Not modelled: the payment's own charge (it is succeeded from the start),
 * a refund of "all that is left" (amount 0, read in the claim's own
 * transaction), refunds of different amounts, purge and expired keys, a
 * key reused with another body, a provider refund for another amount
 * (provider_key_reused), webhooks, the HTTP layer, SQLite's durability.
 */

#ifndef NREFUNDS
#define NREFUNDS 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 2
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 1
#endif
#ifndef MAXSTALL
#define MAXSTALL 1
#endif
#define MAXR 3 /* array size: NREFUNDS is at most 3 */
#define MAXFENCE (1 + MAXCRASH + MAXFAULTS + MAXSTALL)
#define REC NREFUNDS /* the reconciler's index in win[] and busy[] */

#define CHARGE 3 /* the payment's amount */
#define AMT 2    /* what each refund asks for */

/* a row's status; NONE: no row */
#define NONE 0
#define INPROG 1
#define SUCC 2
#define FAIL 3
#define EXCEEDS 4 /* told: the claim refused the amount; no row */

/* lease_expires_at */
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
#define BUSY 9
#define TAKE 10

/* The rows of payment_attempts, one per refund key. */
byte st[MAXR];
byte fence[MAXR];
byte lease[MAXR];
byte holder[MAXR]; /* ghost: who last claimed or took over */

/* The payments row: amount CHARGE, succeeded. */
byte reserved = 0; /* amount_reserved */
byte refunded = 0; /* amount_refunded */

/* The provider: what it holds under each downstream key (nothing, a
 * refund, or a refused refund it keeps), the total it has refunded, and
 * (ghost) how many refunds each oncepay key made. */
#define NDK (MAXR * (MAXFENCE + 1))
#define MADE 1
#define REFUSED 2
byte pl[NDK];
byte ptotal = 0;
byte pcount[MAXR];
bool refuses[MAXR];
byte inflight = 0; /* 1 + downstream key of a request still on its way */

#ifdef PER_ATTEMPT_KEY
#define DK(k, f) ((k) * (MAXFENCE + 1) + (f))
#else
#define DK(k, f) ((k) * (MAXFENCE + 1))
#endif
#define KOF(dk) ((dk) / (MAXFENCE + 1))

/* Ghosts for timing and the budgets. */
bool win[MAXR + 1];
bool busy[MAXR + 1];
byte crashes = 0;
byte faults = 0;
byte stalls = 0;

/* What the clients were told. */
byte told[MAXR];
byte nended = 0;
bool bad_refusal = false;

#define N_IN(s) ((st[0] == (s)) + (st[1] == (s)) + (st[2] == (s)))

/* The provider acts on a refund request under downstream key dk. */
inline provider_refund(dk, res) {
	if
	:: pl[dk] == MADE -> res = OK /* [provider-dedupe] */
	:: pl[dk] == REFUSED -> res = DECLINED /* replayed */
	:: pl[dk] == 0 && refuses[KOF(dk)] -> res = DECLINED;
#ifdef KEEPS_REFUSALS
		pl[dk] = REFUSED /* Stripe keeps a failed refund under the key */
#else
		skip /* the sim keeps nothing of a refusal */
#endif
	:: pl[dk] == 0 && !refuses[KOF(dk)] ->
		pl[dk] = MADE; ptotal = ptotal + AMT; pcount[KOF(dk)]++; res = OK
	fi
}

/* [refund-call] One provider refund; it ends the caller's window (A1). */
inline refund_call(me, dk, res) {
	atomic {
		if
		:: provider_refund(dk, res)
		:: faults < MAXFAULTS -> faults++; provider_refund(dk, res); res = UNKNOWN /* answer lost */
		:: faults < MAXFAULTS -> faults++; res = UNKNOWN /* failed before refunding */
		:: faults < MAXFAULTS && inflight == 0 -> faults++; inflight = dk + 1; res = UNKNOWN /* timed out */
		fi;
		win[me] = false
	}
}

/* [provider-lookup] Lookup by key; an error is a fault. A refused refund
 * kept under the key is found as the refusal [found-declined]. It ends the
 * caller's window unless a refund call may follow (more). */
inline lookup_call(me, dk, res, more) {
	atomic {
		if
		:: pl[dk] == MADE -> res = FOUND
		:: pl[dk] == REFUSED -> res = DECLINED
		:: pl[dk] == 0 -> res = NOTFOUND
		:: faults < MAXFAULTS -> faults++; res = UNKNOWN
		fi;
		if
		:: res != NOTFOUND || !more -> win[me] = false
		:: else
		fi
	}
}

/* takeOverSQL, guarded by the fence read before. */
inline takeover(k, me, readfence, res) {
	atomic {
		if
		:: st[k] == INPROG && fence[k] == readfence && lease[k] != LIVE ->
			fence[k]++; lease[k] = LIVE; holder[k] = me;
			win[me] = true; busy[me] = true; res = OK;
			assert(fence[k] <= MAXFENCE)
		:: else -> res = 0
		fi
	}
}

/* recordRefundSQL (its guard in recordSQL) and settleRefund, one transaction [settle-money]. */
inline record(k, me, myfence, o, res) {
	atomic {
		if
#ifdef RECORD_NO_FENCE
		:: st[k] == INPROG ->
#else
		:: st[k] == INPROG && fence[k] == myfence ->
#endif
			st[k] = o; lease[k] = NOLEASE; res = OK;
			if
			:: o == SUCC -> reserved = reserved - AMT; refunded = refunded + AMT
#ifdef RECORD_KEEPS_RESERVATION
			:: o == FAIL -> skip
#else
			:: o == FAIL -> reserved = reserved - AMT
#endif
			fi
		:: else -> res = 0
		fi;
		busy[me] = false
	}
}

/* releaseSQL. */
inline release(k, me, myfence) {
	atomic {
		if
		:: st[k] == INPROG && fence[k] == myfence -> lease[k] = NOLEASE
		:: else
		fi;
		busy[me] = false
	}
}

/* The claim's refusal: the client is told the refund exceeds what is left.
 * Honest only if the refunds succeeded or in progress leave less than AMT. */
inline refuse(k) {
	bad_refusal = bad_refusal || CHARGE - AMT * (N_IN(SUCC) + N_IN(INPROG)) >= AMT;
	told[k] = EXCEEDS
}

/* A final answer reaches the client. */
inline answer(k, o) {
	told[k] = o;
	nended++
}

/* The read of the row, and what duplicate decides from it. */
inline read_row(k, f, res) {
	if
	:: st[k] == NONE -> res = CLAIM
	:: st[k] == SUCC || st[k] == FAIL -> answer(k, st[k]); goto done /* replay */
	:: st[k] == INPROG && lease[k] == LIVE -> res = BUSY /* 409 */
	:: st[k] == INPROG && lease[k] != LIVE -> f = fence[k]; res = TAKE
	fi
}

/* A dead owner's lease expires. */
inline die(k, me) {
	win[me] = false; busy[me] = false;
	if
	:: holder[k] == me && lease[k] == LIVE -> lease[k] = EXPIRED
	:: else
	fi
}

#define GAP \
	if \
	:: skip \
	:: crashes < MAXCRASH -> crashes++; die(k, me); goto retry \
	fi

/* One client refunding AMT of the payment with its own key, retrying
 * until it gets a final answer or gives up; every pass through retry is a
 * new HTTP request, Service.Refund [refund]. */
proctype Client(byte k) {
	byte me = k;
	byte f;   /* the fence read, then the fence owned */
	byte o;   /* the status to record */
	byte res; /* what the last step said */
#ifdef RESERVE_READ_THEN_UPDATE
	byte left;
#endif

retry:
	atomic {
		f = 0; o = 0; res = 0;
		if
		:: nended++; goto done /* the client gives up */
		:: read_row(k, f, res) /* [read] */
		fi
	}
	if
	:: res == CLAIM ->
#ifdef RESERVE_READ_THEN_UPDATE
		atomic { left = CHARGE - refunded - reserved }
#define FITS (left >= AMT)
#else
#define FITS (CHARGE - refunded - reserved >= AMT)
#endif
		atomic { /* [claim] [reserve]: the insert, the check and the reservation, one transaction */
			if
			:: st[k] == NONE && FITS ->
				st[k] = INPROG; fence[k] = 1; lease[k] = LIVE; reserved = reserved + AMT;
				holder[k] = me; win[me] = true; busy[me] = true; f = 1;
				GAP;
				goto call
			:: st[k] == NONE && !(FITS) -> /* [refuse]: the claim's savepoint rolls back, no row */
				refuse(k); res = EXCEEDS
			:: else -> res = 0
			fi
		}
		if
		:: res == EXCEEDS -> /* 422: ask again later, or give up */
			if
			:: goto retry
			:: nended++; goto done
			fi
		:: else
		fi;
		atomic { read_row(k, f, res) } /* re-read */
	:: else
	fi;
	if /* [duplicate] */
	:: res == BUSY -> goto wait
	:: res == TAKE -> skip
	fi;
	atomic { /* [takeover] */
		takeover(k, me, f, res);
		if
		:: res == OK -> f++; GAP
		:: else -> goto settled
		fi
	}
	lookup_call(me, DK(k, f), res, true); /* [refund-key] [lookup-first] */
	if
	:: res == NOTFOUND -> skip
	:: else -> goto outcome
	fi;
call:
	atomic { refund_call(me, DK(k, f), res); GAP }
outcome:
	if
	:: res == UNKNOWN -> release(k, me, f); goto retry /* [release], 503 */
	:: else
	fi;
	atomic { /* [record] */
		if
		:: res == DECLINED -> o = FAIL
		:: res == OK || res == FOUND -> o = SUCC
		fi;
		record(k, me, f, o, res);
		if
		:: res == OK -> GAP; answer(k, o); goto done
		:: else
		fi
	}
settled:
	atomic { /* [settled] */
		f = 0; o = 0; res = BUSY;
		if
		:: st[k] == INPROG -> skip /* 409 */
		:: else -> answer(k, st[k]); goto done
		fi
	}
wait:
	atomic { (st[k] != INPROG || lease[k] != LIVE) -> goto retry }
done:
	atomic { f = 0; o = 0; res = 0 }
}

#define STALE(i) (NREFUNDS > (i) && st[i] == INPROG && lease[i] != LIVE)

/* Reconciler.RunOnce and settle, for any refund in progress. */
active proctype Reconciler() {
	byte k, f, res;
	byte me = REC;
end_idle:
	atomic { /* Stale, A2 */
		inflight == 0 && (STALE(0) || STALE(1) || STALE(2)) ->
		if
		:: STALE(0) -> k = 0
		:: STALE(1) -> k = 1
		:: STALE(2) -> k = 2
		fi;
		f = fence[k]
	}
	atomic { /* [reconcile-take] */
		takeover(k, me, f, res);
		if
		:: res == OK -> f++
		:: else -> goto reset
		fi;
		if
		:: skip
		:: crashes < MAXCRASH -> crashes++; die(k, me); goto reset
		fi
	}
	lookup_call(me, DK(k, f), res, false); /* [reconcile-look] */
	if
	:: res == UNKNOWN -> release(k, me, f) /* [reconcile-keep] */
	:: res == FOUND -> record(k, me, f, SUCC, res)
	:: res == DECLINED -> record(k, me, f, FAIL, res)
	:: res == NOTFOUND -> record(k, me, f, FAIL, res) /* [reconcile-none] */
	fi;
reset:
	atomic { k = 0; f = 0; res = 0; goto end_idle }
}

#define STALL(i) \
	:: atomic { NREFUNDS > (i) && lease[i] == LIVE && busy[holder[i]] && !win[holder[i]] && stalls < MAXSTALL -> \
		stalls++; lease[i] = EXPIRED }

/* A live owner stalls and its lease runs out; A1: never while it is
 * still in its provider calls. */
active proctype Clock() {
end:
	do
	STALL(0)
	STALL(1)
	STALL(2)
	od
}

/* A refund request that timed out lands at the provider later, or dies. */
active proctype Network() {
	byte res;
end:
	do
	:: atomic { inflight != 0 -> provider_refund(inflight - 1, res); inflight = 0; res = 0 }
	:: atomic { inflight != 0 -> inflight = 0 }
	od
}

init {
	byte i;
	atomic {
		for (i : 0 .. NREFUNDS - 1) {
			if
			:: refuses[i] = true
			:: refuses[i] = false
			fi;
			run Client(i)
		}
		i = 0
	}
}

#define WITHIN_CHARGE (ptotal <= CHARGE)
#define ONE_PER_KEY (pcount[0] <= 1 && pcount[1] <= 1 && pcount[2] <= 1)
#define MATCHES(i) \
	((told[i] != SUCC || pcount[i] >= 1) && (told[i] != FAIL || pcount[i] == 0) && \
	 (st[i] != SUCC || pcount[i] >= 1) && (st[i] != FAIL || pcount[i] == 0))
#define ANSWERS_MATCH \
	(MATCHES(0) && MATCHES(1) && MATCHES(2) && (N_IN(INPROG) != 0 || refunded == ptotal))
#define BOOKS_BALANCE \
	(reserved == AMT * N_IN(INPROG) && refunded == AMT * N_IN(SUCC) && refunded + reserved <= CHARGE)
#define REFUSALS_HONEST (!bad_refusal)

ltl within_charge { [] WITHIN_CHARGE }
ltl one_refund_per_key { [] ONE_PER_KEY }
ltl answers_match { [] ANSWERS_MATCH }
ltl books_balance { [] BOOKS_BALANCE }
ltl refusals_honest { [] REFUSALS_HONEST }
/* Liveness: every refund ends final and every reservation is given back,
 * for good (weak fairness). */
ltl reservations_freed { <> [] (N_IN(INPROG) == 0 && reserved == 0) }
/* all five at once: one search for the correct model */
ltl safe { [] (WITHIN_CHARGE && ONE_PER_KEY && ANSWERS_MATCH && BOOKS_BALANCE && REFUSALS_HONEST) }

/* Witnesses, against a vacuous model: each says a state is never reached
 * that the protocol does reach, so spin must refute every one. */
ltl reach_refunded { [] !(told[0] == SUCC || told[1] == SUCC) }
ltl reach_exceeds { [] !((told[0] == EXCEEDS && st[1] == SUCC) || (told[1] == EXCEEDS && st[0] == SUCC)) }
ltl reach_declined_then_refunded { [] !(told[0] == FAIL && refuses[0] && told[1] == SUCC) }
ltl reach_takeover_refunded { [] !(fence[0] >= 2 && holder[0] != REC && st[0] == SUCC) }
ltl reach_reconcile_found { [] !(holder[0] == REC && st[0] == SUCC) }
ltl reach_reconcile_not_completed { [] !(holder[0] == REC && st[0] == FAIL && !refuses[0] && refunded == AMT) }
