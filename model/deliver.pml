/*
 * One event's delivery to one merchant endpoint, as payment/deliveries.go
 * and the stores run it: NDLV deliverers (think of instances on one
 * PostgreSQL database) each loop: read the delivery if it is pending and
 * no lease is live, claim it with the fence they read (a lease, tries + 1),
 * send one try unless their lease ran out meanwhile, and store how it ended
 * with a write fenced by their claim: delivered on a 2xx, else pending for
 * the next try, or failed for good after MAXTRIES tries. Every database
 * transaction is one atomic step; a try is two: it leaves, and the endpoint
 * acts on it later. A deliverer may die after any step that writes or
 * sends; a dead deliverer's lease expires once its try has landed or died.
 *
 * An operator may also send it again from the admin page (MAXREDO times):
 * RedeliverDelivery starts the delivery over (pending, no tries, a new
 * fence) unless a deliverer holds a live lease on it, and the operator's
 * request then claims, sends and finishes it as a deliverer does.
 *
 * The endpoint accepts a try (2xx; it has the event), refuses it (a 5xx, or
 * a connection dropped before it read it), or takes it and its answer is
 * lost (a hang past the timeout, a connection cut after it processed it).
 * The last is why delivery is at least once: the merchant dedupes by the
 * event's id, which every try of it carries.
 *
 * model_test.go checks it (go test ./model). By hand, in a scratch directory:
 *   spin -a deliver.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m200000 -N safe
 *   spin -a deliver.pml && cc -O2 -DNFAIR=3 -o pan pan.c &&
 *     ./pan -a -f -m200000 -N delivery_ends   (liveness, weak fairness)
 *   spin -a -DSTALL_BEFORE_SEND deliver.pml  (then as above: a known-bad
 *     variant; spin -t -p -DSTALL_BEFORE_SEND deliver.pml replays its trail)
 *
 * Steps and the code they stand for. model_test.go parses this table and
 * fails when a function, statement or text named here is gone from the Go
 * source; every step is tagged [step] in the model below.
 *
 * | step        | Go                                | must contain                                                                                              |
 * |-------------|-----------------------------------|-----------------------------------------------------------------------------------------------------------|
 * | due         | payment.(*Deliverer).batch       | d.Store.DueDeliveries(ctx, d.Now(), d.Limit)                                                              |
 * | due         | sqlitestore.(*DB).DueDeliveries   | WHERE d.state = 'pending' AND d.next_at <= ? AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ?)  |
 * | due         | pgstore.(*DB).DueDeliveries       | WHERE d.state = 'pending' AND d.next_at <= $1 AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= $1) |
 * | claim       | payment.(*Deliverer).deliver      | d.Store.ClaimDelivery(ctx, dd.EventID, dd.EndpointID, dd.Fence, now, leaseUntil)                          |
 * | claim       | sqlitestore.(*DB).ClaimDelivery   | SET fence = fence + 1, lease_expires_at = ?, tries = tries + 1, updated_at = ?                            |
 * | claim       | sqlitestore.(*DB).ClaimDelivery   | WHERE event_id = ? AND endpoint_id = ? AND state = 'pending' AND fence = ?                                |
 * | claim       | sqlitestore.(*DB).ClaimDelivery   | AND (lease_expires_at IS NULL OR lease_expires_at <= ?)                                                   |
 * | claim       | pgstore.(*DB).ClaimDelivery       | WHERE event_id = $3 AND endpoint_id = $4 AND state = 'pending' AND fence = $5                             |
 * | claim       | pgstore.(*DB).ClaimDelivery       | AND (lease_expires_at IS NULL OR lease_expires_at <= $2)                                                  |
 * | lease-bound | payment.(*Deliverer).deliver      | budget := min(d.Timeout, leaseUntil.Sub(d.Now()))                                                         |
 * | lease-bound | payment.(*Deliverer).deliver      | if budget <= 0 {                                                                                          |
 * | lease-bound | payment.NewDeliverer              | if d.Lease <= d.Timeout {                                                                                 |
 * | send        | payment.(*Deliverer).deliver      | d.Sender.Send(sctx, dd.Endpoint, dd.EventID, dd.Body, d.Now())                                            |
 * | send        | outbound.(*Client).Send           | req.Header.Set(HeaderID, eventID)                                                                         |
 * | accepted    | outbound.(*Client).Send           | if resp.StatusCode/100 == 2 {                                                                             |
 * | accepted    | payment.(*Deliverer).deliver      | case sendErr == nil:                                                                                      |
 * | give-up     | payment.(*Deliverer).deliver      | tries := dd.Tries + 1                                                                                     |
 * | give-up     | payment.(*Deliverer).deliver      | case tries > len(d.Schedule):                                                                             |
 * | finish      | payment.(*Deliverer).deliver      | d.Store.FinishDelivery(ctx, dd.EventID, dd.EndpointID, fence, end, d.Now())                               |
 * | finish      | sqlitestore.(*DB).FinishDelivery  | SET state = ?, lease_expires_at = NULL, next_at = ?, last_status = ?, last_error = ?, updated_at = ?       |
 * | finish      | sqlitestore.(*DB).FinishDelivery  | WHERE event_id = ? AND endpoint_id = ? AND state = 'pending' AND fence = ?                                |
 * | finish      | pgstore.(*DB).FinishDelivery      | WHERE event_id = $6 AND endpoint_id = $7 AND state = 'pending' AND fence = $8                             |
 * | crash       | payment.(*Deliverer).deliver      | crashpoint.Hit("after-delivery-claim")                                                                    |
 * | crash       | payment.(*Deliverer).deliver      | crashpoint.Hit("after-delivery-send")                                                                     |
 * | redeliver   | payment.(*Deliverer).Redeliver    | dd, err := d.Store.RedeliverDelivery(ctx, eventID, endpointID, d.Now())                                   |
 * | redeliver   | payment.(*Deliverer).Redeliver    | res, err = d.deliver(ctx, dd)                                                                             |
 * | redeliver   | sqlitestore.(*DB).RedeliverDelivery | SET state = 'pending', fence = fence + 1, lease_expires_at = NULL, tries = 0, next_at = ?, updated_at = ? |
 * | redeliver   | sqlitestore.(*DB).RedeliverDelivery | WHERE event_id = ? AND endpoint_id = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)          |
 * | redeliver   | pgstore.(*DB).RedeliverDelivery   | WHERE event_id = $2 AND endpoint_id = $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)         |
 *
 * Properties (the ltl blocks at the end; -N picks one; safe is the first
 * four at once):
 *   one_try_at_once   at most one try of the delivery is on its way at any
 *                     moment, whatever the deliverers, deaths and pauses.
 *   delivered_true    a delivery stored as delivered was accepted by the
 *                     endpoint.
 *   tries_honest      how a try ended is decided by the delivery's own
 *                     count of tries: pending for the next one while the
 *                     schedule has one, failed for good past its end.
 *   no_stale_write    a deliverer whose claim was taken over (a higher
 *                     fence) never writes how its try ended.
 *   delivery_ends     <> not pending: the delivery ends delivered or
 *                     failed for good, though deliverers die and the
 *                     endpoint fails within the budgets (liveness, weak
 *                     fairness).
 *   reach_*           witnesses that must fail: the model does deliver,
 *                     deliver after a refused try, deliver a second time
 *                     after a lost answer (the merchant's dedupe is
 *                     needed), give up, and deliver by the operator's Send
 *                     again, so the properties are not vacuous.
 *
 * Known-bad variants, one -D flag each; model_test.go checks spin refutes
 * each of them with a trail:
 *   CLAIM_NO_FENCE     the claim neither checks nor bumps the fence: a
 *                      deliverer decides by a tries count it read before
 *                      another deliverer's try, and tries again past the
 *                      schedule's end
 *   FINISH_NO_FENCE    FinishDelivery without AND fence = ?
 *   STALL_BEFORE_SEND  a deliverer's lease may run out before its send (a
 *                      process paused between its claim and its send), and
 *                      it sends anyway: the lease-bound guard dropped
 *   ANY_ANSWER_DELIVERS every answer counts as delivered, a 5xx included
 *   CLAIM_NULL_LEASE   ClaimDelivery without lease_expires_at IS NULL OR: a
 *                      delivery released for its next try is never claimed
 *
 * Time, abstracted. A try's send ends within the deliverer's lease
 * (NewDeliverer keeps the lease longer than a try's timeout, and the try's
 * deadline is the sooner of its timeout and its lease's end) [lease-bound];
 * a deliverer paused between its claim and its send past its lease finds
 * its budget spent and sends nothing. So a lease runs out under a live
 * deliverer only while it has no try on its way (MAXSTALL of those), and a
 * dead one's once its try has landed or died. The schedule's waits are
 * not modelled: a pending delivery with no live lease is due.
 *
 * Bounds: NDLV deliverers and one operator; MAXREDO redeliveries; MAXCRASH deaths; MAXFAULTS tries refused or
 * with their answer lost; MAXSTALL leases running out under a live
 * deliverer; MAXTRIES tries in the schedule. The defaults are the
 * two-deliverers scope, where model_test.go checks the safety and the
 * liveness properties; it also checks three deliverers with one of each.
 *
 * Not modelled: more than one delivery (each is its own row and fence;
 * deliverers share nothing else), the endpoint's health and its disabling
 * (it only stops claims), the signature (outbound's tests check it against
 * the reference library), the outbox write that makes the delivery
 * (the store contract's OutboxBothOrNeither), and the schedule's waits.
 */

#ifndef NDLV
#define NDLV 2
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
#ifndef MAXTRIES
#define MAXTRIES 2
#endif
#ifndef MAXREDO
#define MAXREDO 1
#endif
#define MAXD 4 /* array size: NDLV is at most 3, and the operator */
#define OPERATOR NDLV

/* the delivery's state */
#define PENDING 1
#define DELIVERED 2
#define FAILED 3

/* what a try's answer said */
#define ACCEPTED 1
#define REFUSED 2
#define LOST 3

/* lease_expires_at: NULL, in the future, in the past */
#define NOLEASE 0
#define LIVE 1
#define EXPIRED_LEASE 2

/* a deliverer's try: none, on its way, on its way from a dead deliverer */
#define FLYING 1
#define ORPHANED 2

/* The delivery's row. */
byte st = PENDING;
byte fence = 1;
byte tries = 0;
byte lease = NOLEASE;

/* The endpoint: how many tries it accepted or took. */
byte got = 0;

/* Ghosts. */
byte holder = 0;      /* who took the lease last */
bool orphan = false;  /* the live lease's holder died */
byte fly[MAXD];       /* its try on its way */
byte ans[MAXD];       /* what the endpoint answered it */
bool stalled[MAXD];   /* its lease ran out under it before its send */
bool stale_write = false;
bool miscount = false;  /* a try's end decided by a count that was not the delivery's */
bool accepted_ever = false;
byte crashes = 0;
byte faults = 0;
byte stalls = 0;
byte redos = 0;
bool sent_again = false; /* the operator's try delivered it */
bool refused_once = false; /* a try was refused before the delivery */

#define NFLY ((fly[0] != 0) + (fly[1] != 0) + (fly[2] != 0) + (fly[3] != 0))

#ifdef CLAIM_NO_FENCE
#define FENCE_OK(f) true
#define BUMP 0
#else
#define FENCE_OK(f) (fence == (f))
#define BUMP 1
#endif

#ifdef FINISH_NO_FENCE
#define FINISH_FENCE_OK(f) true
#else
#define FINISH_FENCE_OK(f) (fence == (f))
#endif

#ifdef CLAIM_NULL_LEASE
#define LEASE_GONE (lease == EXPIRED_LEASE)
#else
#define LEASE_GONE (lease == NOLEASE || lease == EXPIRED_LEASE)
#endif

#ifdef STALL_BEFORE_SEND
#define SENDS_PAST_LEASE(i) true
#else
#define SENDS_PAST_LEASE(i) (!stalled[i])
#endif

#ifdef ANY_ANSWER_DELIVERS
#define DELIVERS(a) true
#else
#define DELIVERS(a) ((a) == ACCEPTED)
#endif

/* A deliverer dies (SIGKILL, power cut): its try, if one is on its way,
 * still lands or dies, and its lease lasts until then. */
inline die(me) {
	crashes++;
	if
	:: fly[me] == FLYING -> fly[me] = ORPHANED
	:: else
	fi;
	if
	:: lease == LIVE && holder == me -> orphan = true
	:: else
	fi;
	stalled[me] = false
}

/* The deliverer may die right after the step this ends; it is started
 * again, with nothing but the database [crash]. */
#define GAP \
	if \
	:: skip \
	:: crashes < MAXCRASH -> die(me); goto loop \
	fi

/* One deliverer: Deliverer.RunOnce and deliver, run again and again (on
 * its schedule, and from the command line); or the operator's Send again,
 * Deliverer.Redeliver, whose first step starts the delivery over. */
proctype Deliverer(byte me) {
	byte f; /* the fence read, then the fence owned */
	byte t; /* tries, as read before the claim */
	byte a; /* the try's answer */
	byte o; /* the state to store */

loop:
	if
	:: me == OPERATOR ->
		atomic { /* [redeliver]: pending, no tries, a new fence, unless a deliverer holds a live lease */
			f = 0; t = 0; a = 0; o = 0;
			if
			:: redos < MAXREDO && lease != LIVE ->
				redos++; st = PENDING; fence++; tries = 0; lease = NOLEASE; orphan = false; f = fence
			:: else -> goto done /* refused, or the operator is done */
			fi
		}
	:: else ->
		atomic { /* [due]: the delivery, if pending and no deliverer holds a live lease */
			f = 0; t = 0; a = 0; o = 0;
			if
			:: st != PENDING -> goto done
			:: st == PENDING && lease != LIVE -> f = fence; t = tries
			fi
		}
	fi;
	atomic { /* [claim]: fence + 1, a lease, tries + 1, if the fence read still holds and no lease is live */
		if
		:: st == PENDING && FENCE_OK(f) && LEASE_GONE ->
			fence = fence + BUMP; f = fence; tries++; lease = LIVE;
			holder = me; orphan = false; stalled[me] = false;
			GAP
		:: else -> goto loop /* another deliverer has it */
		fi
	}
	atomic { /* [lease-bound] [send]: the try leaves, unless the lease ran out since the claim */
		if
		:: SENDS_PAST_LEASE(me) -> fly[me] = FLYING; GAP
		:: else -> stalled[me] = false; goto loop /* budget spent: sends nothing */
		fi
	}
	atomic { /* its answer, once the endpoint acted on it [accepted] */
		fly[me] == 0 -> a = ans[me]; ans[me] = 0;
		if
		:: DELIVERS(a) -> o = DELIVERED
		:: !DELIVERS(a) && t + 1 > MAXTRIES -> o = FAILED /* [give-up] */
		:: !DELIVERS(a) && t + 1 <= MAXTRIES -> o = PENDING
		fi;
		GAP
	}
	atomic { /* [finish]: how the try ended, under the claim's fence */
		if
		:: st == PENDING && FINISH_FENCE_OK(f) ->
			stale_write = stale_write || fence != f;
			miscount = miscount || (o == FAILED && tries <= MAXTRIES) || (o == PENDING && tries > MAXTRIES);
			if
			:: o == PENDING -> refused_once = true
			:: else
			fi;
			st = o; lease = NOLEASE; orphan = false;
			sent_again = sent_again || (me == OPERATOR && o == DELIVERED)
		:: else /* fenced out: another deliverer has it, or finished it */
		fi
	}
	goto loop;
done:
	skip
}

/* The endpoint acts on deliverer i's try, and answers it if the deliverer
 * is still alive: it accepts it, refuses it, or takes it and the answer is
 * lost (a hang past the timeout). */
#define LAND(i) \
	:: atomic { NDLV >= (i) && fly[i] != 0 -> \
		if \
		:: got++; accepted_ever = true; a = ACCEPTED \
		:: faults < MAXFAULTS -> faults++; a = REFUSED \
		:: faults < MAXFAULTS -> faults++; got++; a = LOST \
		fi; \
		if \
		:: fly[i] == FLYING -> ans[i] = a \
		:: else \
		fi; \
		fly[i] = 0; a = 0 }

active proctype Endpoint() {
	byte a;
end:
	do
	LAND(0)
	LAND(1)
	LAND(2)
	LAND(3)
	od
}

/* The leases run out: a dead deliverer's once its try has landed or died;
 * a live one's only while it has no try on its way, within MAXSTALL. A
 * deliverer whose lease ran out between its claim and its send sends
 * nothing [lease-bound]. */
#define STALL(i) \
	:: atomic { lease == LIVE && !orphan && holder == (i) && fly[i] == 0 && stalls < MAXSTALL -> \
		stalls++; stalled[i] = true; lease = EXPIRED_LEASE }

active proctype Leases() {
end:
	do
	:: atomic { lease == LIVE && orphan && fly[holder] == 0 -> lease = EXPIRED_LEASE; orphan = false }
	STALL(0)
	STALL(1)
	STALL(2)
	STALL(3)
	od
}

init {
	byte i;
	atomic {
		for (i : 0 .. NDLV) { /* NDLV deliverers, then the operator */
			run Deliverer(i)
		}
		i = 0
	}
}

#define ONE_TRY_AT_ONCE (NFLY <= 1)
#define DELIVERED_TRUE (st != DELIVERED || accepted_ever)
#define TRIES_HONEST (!miscount)
#define NO_STALE_WRITE (!stale_write)

ltl one_try_at_once { [] ONE_TRY_AT_ONCE }
ltl delivered_true { [] DELIVERED_TRUE }
ltl tries_honest { [] TRIES_HONEST }
ltl no_stale_write { [] NO_STALE_WRITE }
/* the four at once: one search for the correct model */
ltl safe { [] (ONE_TRY_AT_ONCE && DELIVERED_TRUE && TRIES_HONEST && NO_STALE_WRITE) }

/* Liveness: the delivery ends, delivered or failed for good (weak fairness). */
ltl delivery_ends { <> (st != PENDING) }

/* Witnesses, against a vacuous model: each says a state is never reached
 * that the protocol does reach, so spin must refute every one. */
ltl reach_delivered { [] !(st == DELIVERED) }
ltl reach_delivered_after_refusal { [] !(st == DELIVERED && refused_once) }
ltl reach_delivered_twice { [] !(st == DELIVERED && got >= 2) }
ltl reach_failed { [] !(st == FAILED) }
ltl reach_sent_again { [] !sent_again }
