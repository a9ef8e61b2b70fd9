/*
 * The forward queue, as payment/offline.go and the stores run it: one
 * payment whose first provider call ended with an unknown outcome was
 * queued (202), and NFWD forwarders (think of instances on one PostgreSQL
 * database) each loop: read the row if no lease is live, claim it with the
 * fence they read, ask the provider by the payment's downstream key first
 * when a call may have reached it or when the payment is past its max age,
 * charge only while the whole lease ends before the max age, and settle
 * with a write fenced by their claim, or release the lease. Every database
 * transaction and every provider call is one atomic step, but a charge
 * request is two: it leaves, and the provider acts on it later, so that the
 * clock may move while it is on its way. A forwarder may die after any step
 * that writes or calls the provider; a dead forwarder's lease expires (an
 * environment step, once its request, if any, has landed or died).
 *
 * The provider here does NOT dedupe: every charge request that lands is a
 * new charge, and each one may be declined on its own (a soft decline, then
 * a success). What keeps the payment to one charge must be oncepay's claim,
 * fence and lookup alone. A lookup by key finds any charge made under it.
 *
 * model_test.go checks it (go test ./model). By hand, in a scratch directory:
 *   spin -a forward.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m200000 -N safe
 *   spin -a -DMAXFAULTS=1 forward.pml && cc -O2 -DNFAIR=3 -o pan pan.c &&
 *     ./pan -a -f -m200000 -N queue_empties   (liveness, weak fairness)
 *   spin -a -DCLAIM_NO_FENCE forward.pml  (then as above: a known-bad
 *     variant; spin -t -p -DCLAIM_NO_FENCE forward.pml replays its trail)
 *
 * Steps and the code they stand for. model_test.go parses this table and
 * fails when a function, statement or text named here is gone from the Go
 * source; every step is tagged [step] in the model below.
 *
 * | step            | Go                               | must contain                                                                              |
 * |-----------------|----------------------------------|-------------------------------------------------------------------------------------------|
 * | queue           | payment.(*Service).own           | s.queue(ctx, a, lookupFirst                                                               |
 * | queue           | payment.(*Service).queue         | s.Store.Queue(ctx, a.Scope, a.Key, a.Fence, o, reached, s.Now())                          |
 * | queue           | sqlitestore.(*DB).Queue          | VALUES (?, ?, ?, ?, ?, 1, 0, ?, ?, ?)                                                     |
 * | max-age         | sqlitestore.(*DB).Queue          | expires := created + maxAge                                                               |
 * | due             | payment.(*Forwarder).RunOnce     | f.Service.Store.DueForwards(ctx, f.Service.Now(), f.Limit)                                |
 * | due             | sqlitestore.(*DB).DueForwards    | WHERE lease_expires_at IS NULL OR lease_expires_at <= ?                                   |
 * | claim           | payment.(*Forwarder).forward     | s.Store.ClaimForward(ctx, q.PaymentID, q.Fence, now, now.Add(s.Lease))                    |
 * | claim           | sqlitestore.(*DB).ClaimForward   | SET fence = fence + 1, lease_expires_at = ?, tries = tries + 1, reached = 1               |
 * | claim           | sqlitestore.(*DB).ClaimForward   | WHERE payment_id = ? AND fence = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?) |
 * | claim           | pgstore.(*DB).ClaimForward       | SET fence = fence + 1, lease_expires_at = $1, tries = tries + 1, reached = true           |
 * | claim           | pgstore.(*DB).ClaimForward       | WHERE payment_id = $2 AND fence = $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $4) |
 * | lookup-first    | payment.(*Forwarder).outcome     | if q.Reached                                                                              |
 * | lookup-first    | payment.(*Forwarder).outcome     | o, found, err := op.find(pctx, a)                                                         |
 * | lookup-first    | payment.(payments).find          | IdempotencyKey: DownstreamKey(a.Scope, a.Key)                                             |
 * | expire          | payment.(*Forwarder).outcome     | expired := !now.Before(q.ExpiresAt)                                                       |
 * | expire          | payment.(*Forwarder).outcome     | return expiredOutcome(), nil                                                              |
 * | near-expiry     | payment.(*Forwarder).outcome     | case now.Add(s.Lease).After(q.ExpiresAt):                                                 |
 * | near-expiry     | payment.(*Forwarder).outcome     | return Outcome{}, errNotYetExpired                                                        |
 * | charge          | payment.(*Forwarder).outcome     | return op.move(pctx, a)                                                                   |
 * | charge          | payment.(payments).move          | p.s.Provider.Charge(ctx, ChargeRequest{                                                   |
 * | charge          | payment.(payments).move          | IdempotencyKey: DownstreamKey(a.Scope, a.Key)                                             |
 * | release         | payment.(*Forwarder).forward     | s.Store.ReleaseForward(ctx, q.PaymentID, fence, err.Error(), s.Now())                     |
 * | release         | sqlitestore.(*DB).ReleaseForward | SET lease_expires_at = NULL                                                               |
 * | release         | sqlitestore.(*DB).ReleaseForward | WHERE payment_id = ? AND fence = ?                                                        |
 * | release         | pgstore.(*DB).ReleaseForward     | WHERE payment_id = $2 AND fence = $3                                                      |
 * | settle          | payment.(*Forwarder).forward     | s.Store.Forwarded(ctx, q.PaymentID, fence,                                                |
 * | settle          | sqlitestore.(*DB).Forwarded      | DELETE FROM forward_queue WHERE payment_id = ? AND fence = ?                              |
 * | settle          | sqlitestore.(*DB).Forwarded      | if n, err := res.RowsAffected(); err != nil                                               |
 * | settle          | sqlitestore.(*DB).Forwarded      | WHERE id = ? AND status = 'queued'                                                        |
 * | settle          | pgstore.(*DB).Forwarded          | WITH q AS (DELETE FROM forward_queue WHERE payment_id = $1 AND fence = $2                 |
 * | lease-bound     | payment.(*Forwarder).outcome     | budget := min(s.ProviderTimeout, leaseUntil.Sub(s.Now()))                                 |
 * | lease-bound     | payment.(*Forwarder).outcome     | if budget <= 0 {                                                                          |
 * | lease-bound     | payment.(*Forwarder).forward     | f.outcome(ctx, *a, q, now, now.Add(s.Lease))                                              |
 * | crash           | payment.(*Forwarder).forward     | crashpoint.Hit("after-forward-claim")                                                     |
 * | crash           | payment.(*Forwarder).forward     | crashpoint.Hit("after-forward-charge")                                                    |
 * | provider-lookup | sim.(*Sim).Lookup                | s.byKey(ctx, req.IdempotencyKey)                                                          |
 * | no-dedupe       | sim.(*Sim).Charge                | insert = s.again                                                                          |
 *
 * Properties (the ltl blocks at the end; -N picks one; safe is the first
 * three at once):
 *   one_charge        the provider makes at most one charge for the
 *                     payment, the first call's included.
 *   expired_uncharged no charge lands at or past the max age, and an
 *                     expired payment holds no charge: it was not charged
 *                     before it expired, nor after.
 *   status_matches    a settled payment is succeeded if and only if the
 *                     provider charged it (failed and expired: no charge).
 *   queue_empties     <> settled: the payment leaves the queue, succeeded,
 *                     failed or expired, though forwarders die, calls fail
 *                     and lookups err within the budgets (liveness, weak
 *                     fairness).
 *   reach_*           witnesses that must fail: the model does settle a
 *                     payment succeeded by its own charge, succeeded by the
 *                     lookup after a forwarder's answer was lost, succeeded
 *                     by the lookup past the max age, failed, and expired,
 *                     so the properties are not vacuous.
 *
 * Known-bad variants, one -D flag each; model_test.go checks spin refutes
 * each of them with a trail:
 *   CLAIM_NO_FENCE           the claim neither checks nor bumps the fence: a
 *                            forwarder acts on a reached flag it read before
 *                            another forwarder's try
 *   NO_LOOKUP_FIRST          a forwarder never asks the provider first: it
 *                            charges, or (past the max age) expires, directly
 *   SETTLE_NO_FENCE          Forwarded's DELETE without AND fence = ?
 *   RELEASE_NO_FENCE         ReleaseForward without AND fence = ?
 *   CHARGE_NEAR_EXPIRY       a forwarder charges whenever the payment is not
 *                            yet expired, though its lease would outlive the
 *                            max age
 *   REACHED_NOT_SET_AT_CLAIM the claim leaves reached as it was: a forwarder
 *                            killed after charging is followed by one that
 *                            charges again
 *   STALL_BEFORE_CHARGE      a forwarder's lease may run out before its
 *                            provider calls (a process paused between its
 *                            claim and its charge): assumption F1 dropped
 *   CLAIM_NULL_LEASE         ClaimForward without lease_expires_at IS NULL
 *                            OR: a queued or released payment can never be
 *                            claimed (queue_empties)
 *
 * Time, abstracted. The clock has three phases against the payment's max
 * age E and the lease L: BEFORE (now + L <= E: a lease taken now ends by
 * the max age), NEAR (now < E < now + L) and PAST (now >= E). It moves
 * BEFORE to NEAR to PAST once each [max-age]. A forwarder's now is the
 * phase at its claim (forward reads the clock once, just before it).
 *   F1 A forwarder's provider calls, a charge request still on its way
 *      included, end within its lease: the lease does not run out between
 *      the claim and the end of those calls (win below). After them a live
 *      forwarder may stall past its lease, which costs one of MAXSTALL; a
 *      dead one's lease expires once its request has landed or died.
 *   F2 So a lease taken BEFORE, and every call made under it, ends by the
 *      max age: the clock passes E only when no such lease is still in its
 *      calls, and passing E ends such a lease.
 *   The code keeps F1 itself [lease-bound], as own does for a request
 *   (lease-bound in oncepay.pml): the forwarder's provider deadline ends
 *   with its lease, and a forwarder whose lease ran out between its claim
 *   and its calls (a paused process) calls nothing and leaves the payment
 *   queued (payment.TestForwarderPastItsLeaseDoesNotCall). Without that
 *   guard, STALL_BEFORE_CHARGE is the trail: a second charge at a provider
 *   that does not dedupe; a charge after the payment expired, at one that
 *   does too.
 *   F0 The first call, made by the request that queued the payment, has
 *      landed or died before the payment is queued (its outcome is chosen at
 *      the start). A provider that dedupes makes a late one harmless; one
 *      that does not would charge it beside a forwarder's.
 *
 * Bounds: NFWD forwarders; MAXCRASH deaths of a forwarder; MAXFAULTS
 * provider faults (a charge's answer lost after charging, a charge that
 * fails or dies before charging, a lookup error); MAXSTALL leases running
 * out under a live forwarder after its calls. A forwarder that found the
 * payment too near its max age to charge tries again once it has passed
 * (the tries between repeat the same claim and release; allowing three
 * more of them passes too, in 2.4 times the states). Every claim but the
 * first needs a lease freed by one of those, by the max age passing, or by
 * that release (once in each life of a forwarder), so the fence stays at
 * most MAXFENCE (an assertion). The defaults are the two-forwarders scope,
 * where model_test.go checks the safety and the liveness properties; it
 * also checks three forwarders with one of each.
 *
 * Not modelled: more than one payment (each payment is its own row, fence
 * and downstream key; forwarders share nothing else), the merchant's
 * limits and the queue's totals (Queue's transaction), clocks that differ
 * between instances (a forwarder whose clock runs ahead takes a lease
 * early), a provider that forgets a key (the max age is at most its
 * window), tries and last_error (shown to operators, decided nothing), the
 * circuit breaker (a call it refuses is a call that failed before
 * reaching the provider), the attempt's 202, replays and the HTTP layer,
 * and the database's own durability (a committed statement survives).
 */

#ifndef NFWD
#define NFWD 2
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
#define MAXF 3 /* array size: NFWD is at most 3 */
#define MAXFENCE (1 + 1 + MAXFAULTS + MAXSTALL + 1 + NFWD + 2 * MAXCRASH)

/* the clock against the payment's max age */
#define BEFORE 0
#define NEAR 1
#define PAST 2

/* the payment's status */
#define QUEUED 1
#define SUCC 2
#define FAIL 3
#define EXPIRED 4

/* the answer of one provider call */
#define OK 1
#define FOUND 2
#define NOTFOUND 3
#define DECLINED 4
#define UNKNOWN 5

/* lease_expires_at: NULL, in the future, in the past */
#define NOLEASE 0
#define LIVE 1
#define EXPIRED_LEASE 2

/* a forwarder's charge request: none, on its way, on its way from a dead forwarder */
#define FLYING 1
#define ORPHANED 2

/* a forwarder's window: in its provider calls, under a lease taken NEAR or PAST, or BEFORE (F2) */
#define INCALLS 1
#define BEFORE_CALLS 2

/* how a succeeded payment was settled (ghost) */
#define BY_CHARGE 1
#define BY_LOOKUP 2
#define BY_LOOKUP_PAST 3

/* The payment, and its row of forward_queue: present while st is QUEUED. */
byte st = QUEUED;
byte fence = 1;
byte lease = NOLEASE; /* lease_expires_at */
bool reached;
byte phase = BEFORE;

/* The provider: how many charges it made under the payment's key. */
byte ncharges = 0;
bool late_charge = false; /* ghost: a charge landed at or past the max age */

/* Ghosts: the live lease, timing and the budgets. */
byte holder = 0;           /* who took the lease last */
bool orphan = false;       /* the live lease's holder died */
bool lease_before = false; /* the live lease was taken BEFORE: it ends by the max age (F2) */
byte win[MAXF];            /* from its claim to the end of its provider calls (F1): INCALLS, or BEFORE_CALLS under a lease taken BEFORE */
byte fly[MAXF];            /* its charge request on its way */
byte ans[MAXF];            /* what the provider answered it */
byte crashes = 0;
byte faults = 0;
byte stalls = 0;

/* Ghosts for the witnesses. */
byte how = 0;
bool lost_answer = false; /* a forwarder's charge landed and its answer was lost */

#ifdef CLAIM_NO_FENCE
#define FENCE_OK(f) true
#define BUMP 0
#else
#define FENCE_OK(f) (fence == (f))
#define BUMP 1
#endif

#ifdef REACHED_NOT_SET_AT_CLAIM
#define REACHED_AFTER_CLAIM reached
#else
#define REACHED_AFTER_CLAIM true
#endif

#ifdef NO_LOOKUP_FIRST
#define ASKS_FIRST(r, now) false
#else
#define ASKS_FIRST(r, now) ((r) || (now) == PAST)
#endif

#ifdef CHARGE_NEAR_EXPIRY
#define MAY_CHARGE(now) ((now) != PAST)
#else
#define MAY_CHARGE(now) ((now) == BEFORE)
#endif

#ifdef SETTLE_NO_FENCE
#define SETTLE_FENCE_OK(f) true
#else
#define SETTLE_FENCE_OK(f) (fence == (f))
#endif

#ifdef RELEASE_NO_FENCE
#define RELEASE_FENCE_OK(f) true
#else
#define RELEASE_FENCE_OK(f) (fence == (f))
#endif

#ifdef CLAIM_NULL_LEASE
#define LEASE_GONE (lease == EXPIRED_LEASE)
#else
#define LEASE_GONE (lease == NOLEASE || lease == EXPIRED_LEASE)
#endif

#ifdef STALL_BEFORE_CHARGE
#define MAY_STALL(i) (fly[i] == 0) /* paused before its call */
#else
#define MAY_STALL(i) (win[i] == 0)
#endif

#define END_LEASE(l) lease = (l); orphan = false; lease_before = false

/* A forwarder dies (SIGKILL, power cut): its request, if one is on its
 * way, still lands or dies, and its lease lasts until then. */
inline die(me) {
	crashes++;
	if
	:: fly[me] == FLYING -> fly[me] = ORPHANED
	:: else -> win[me] = 0
	fi;
	if
	:: lease == LIVE && holder == me -> orphan = true
	:: else
	fi
}

/* The forwarder may die right after the step this ends; it is started
 * again, with nothing but the database [crash]. */
#define GAP \
	if \
	:: skip \
	:: crashes < MAXCRASH -> die(me); goto loop \
	fi

/* ReleaseForward, guarded by the claim's fence [release]. */
inline release(me, f) {
	atomic {
		if
		:: st == QUEUED && RELEASE_FENCE_OK(f) -> END_LEASE(NOLEASE)
		:: else /* fenced out */
		fi;
		win[me] = 0
	}
}

/* Forwarded, one transaction [settle]: the queue row is deleted under the
 * claim's fence, and only then the payment takes its status. */
inline settle(me, f, o, h) {
	atomic {
		if
		:: st == QUEUED && SETTLE_FENCE_OK(f) -> st = o; how = h; END_LEASE(NOLEASE) /* the row is gone */
		:: else /* fenced out: another forwarder has it, or settled it */
		fi;
		win[me] = 0
	}
}

/* One forwarder: Forwarder.RunOnce and forward, run again and again (on
 * its schedule, when the link comes back, from the command line). */
proctype Forwarder(byte me) {
	byte f;   /* the fence read, then the fence owned */
	bool r;   /* reached, as read before the claim */
	byte now; /* the clock's phase at the claim */
	byte res; /* what the last call said */
	byte o;   /* the status to settle */
	byte h;   /* how (ghost) */

loop:
	atomic { /* [due]: the row, if no forwarder holds a live lease on it */
		f = 0; r = false; now = 0; res = 0; o = 0; h = 0;
		if
		:: st != QUEUED -> goto done
		:: st == QUEUED && lease != LIVE -> f = fence; r = reached
		fi
	}
	atomic { /* [claim]: fence = fence+1, a lease, reached = 1, if the fence read still holds and no lease is live */
		if
		:: st == QUEUED && FENCE_OK(f) && LEASE_GONE ->
			fence = fence + BUMP; f = fence; lease = LIVE; reached = REACHED_AFTER_CLAIM;
			holder = me; orphan = false; lease_before = (phase == BEFORE);
			now = phase; win[me] = INCALLS + (phase == BEFORE);
			assert(fence <= MAXFENCE);
			GAP
		:: else -> goto loop /* another forwarder has it */
		fi
	}
	if
	:: ASKS_FIRST(r, now) ->
		atomic { /* [lookup-first] [provider-lookup] */
			if
			:: ncharges != 0 -> res = FOUND
			:: ncharges == 0 -> res = NOTFOUND
			:: faults < MAXFAULTS -> faults++; res = UNKNOWN
			fi;
			if
			:: res == NOTFOUND && MAY_CHARGE(now) -> skip /* a charge follows */
			:: else -> win[me] = 0
			fi;
			GAP
		}
		if
		:: res == FOUND ->
			o = SUCC;
			if
			:: now == PAST -> h = BY_LOOKUP_PAST
			:: else -> h = BY_LOOKUP
			fi;
			goto to_settle
		:: res == UNKNOWN -> goto to_release
		:: else
		fi
	:: else
	fi;
	if
	:: now == PAST -> o = EXPIRED; goto to_settle /* [expire]: nothing found past the max age */
	:: now != PAST && !MAY_CHARGE(now) -> goto to_release /* [near-expiry]: its lease would outlive the max age */
	:: else
	fi;
	atomic { /* [charge]: the request leaves */
		fly[me] == 0 -> fly[me] = FLYING;
		GAP
	}
	atomic { /* its answer, once the provider acted on it */
		fly[me] == 0 -> res = ans[me]; ans[me] = 0;
		if
		:: res == OK -> o = SUCC; h = BY_CHARGE
		:: res == DECLINED -> o = FAIL
		:: res == UNKNOWN -> goto to_release
		fi;
		GAP
	}
to_settle:
	settle(me, f, o, h);
	goto loop
to_release:
	release(me, f);
	if
	:: now == NEAR -> atomic { phase == PAST -> goto loop } /* tries again once it has passed */
	:: else -> goto loop
	fi;
done:
	skip
}

/* The provider acts on forwarder i's charge request, and answers it if the
 * forwarder is still alive. It does not dedupe [no-dedupe]: a request that
 * lands is a new charge, unless this call is declined. */
#define LAND(i) \
	:: atomic { NFWD > (i) && fly[i] != 0 -> \
		if \
		:: ncharges++; late_charge = late_charge || phase == PAST; res = OK \
		:: faults < MAXFAULTS -> faults++; ncharges++; late_charge = late_charge || phase == PAST; \
			lost_answer = lost_answer || fly[i] == FLYING; res = UNKNOWN /* charged, the answer lost */ \
		:: res = DECLINED \
		:: faults < MAXFAULTS -> faults++; res = UNKNOWN /* failed before charging */ \
		fi; \
		if \
		:: fly[i] == FLYING -> ans[i] = res \
		:: else \
		fi; \
		fly[i] = 0; win[i] = 0; res = 0 }

active proctype Network() {
	byte res;
end:
	do
	LAND(0)
	LAND(1)
	LAND(2)
	od
}

/* The leases run out: a dead forwarder's once its request has landed or
 * died, a live one's only after its provider calls (F1), within MAXSTALL:
 * a forwarder whose lease ran out before its calls makes none, and its
 * calls end with its lease [lease-bound]. */
active proctype Leases() {
end:
	do
	:: atomic { lease == LIVE && orphan && fly[holder] == 0 -> END_LEASE(EXPIRED_LEASE) }
	:: atomic { lease == LIVE && !orphan && MAY_STALL(holder) && stalls < MAXSTALL ->
		stalls++; win[holder] = 0; END_LEASE(EXPIRED_LEASE) }
	od
}

/* The clock passes the point where a lease would outlive the max age, then
 * the max age itself [max-age], which ends every lease taken BEFORE (F2). */
#define BEFORE_IN_CALLS(i) (NFWD > (i) && win[i] == BEFORE_CALLS)

active proctype Clock() {
	atomic { phase == BEFORE -> phase = NEAR }
	atomic {
		!(BEFORE_IN_CALLS(0) || BEFORE_IN_CALLS(1) || BEFORE_IN_CALLS(2)) -> phase = PAST;
		if
		:: lease == LIVE && lease_before -> END_LEASE(EXPIRED_LEASE)
		:: else
		fi
	}
}

/* [queue]: the first call's outcome is unknown: it charged and its answer
 * was lost, it failed before charging, or it was never made (the link
 * known to be down: reached is false). own queued the payment: fence 1, no
 * lease, within its max age. */
init {
	byte i;
	atomic {
		if
		:: ncharges = 1; reached = true
		:: ncharges = 0; reached = true
		:: ncharges = 0; reached = false
		fi;
		for (i : 0 .. NFWD - 1) {
			run Forwarder(i)
		}
		i = 0
	}
}

#define ONE_CHARGE (ncharges <= 1)
#define EXPIRED_UNCHARGED ((st != EXPIRED || ncharges == 0) && !late_charge)
#define STATUS_MATCHES (st == QUEUED || ((st == SUCC) == (ncharges != 0)))

ltl one_charge { [] ONE_CHARGE }
ltl expired_uncharged { [] EXPIRED_UNCHARGED }
ltl status_matches { [] STATUS_MATCHES }
/* the three at once: one search for the correct model */
ltl safe { [] (ONE_CHARGE && EXPIRED_UNCHARGED && STATUS_MATCHES) }

/* Liveness: the payment leaves the queue (weak fairness). */
ltl queue_empties { <> (st != QUEUED) }

/* Witnesses, against a vacuous model: each says a state is never reached
 * that the protocol does reach, so spin must refute every one. */
ltl reach_charged { [] !(st == SUCC && how == BY_CHARGE) }
ltl reach_found_after_lost_answer { [] !(st == SUCC && how == BY_LOOKUP && lost_answer) }
ltl reach_found_past_max_age { [] !(st == SUCC && how == BY_LOOKUP_PAST) }
ltl reach_declined { [] !(st == FAIL) }
ltl reach_expired { [] !(st == EXPIRED) }
