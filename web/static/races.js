// The three races after the first, each on two lanes with the same inputs:
// the mirror (a provider's events, again and out of order), refunds
// racing, and the dead link. Uses T, post, item, sleep, putFaults, getFaults
// and busy from demo.js.
"use strict";

const QUIET = { latency: "0s", fail_before_charge: 0, fail_after_charge: 0, fail_lookup: 0 };

// say appends one line of a lane's narration, as it happens.
function say(id, text, cls) {
  const li = item(text, cls);
  $("#" + id).append(li);
  return li;
}

function setCount(id, n, good) {
  const el = $("#" + id);
  el.textContent = String(n);
  el.dataset.n = String(n);
  el.className = "n " + (good ? "good" : "danger");
}

function setState(id, state, good) {
  const el = $("#" + id);
  el.dataset.state = state;
  el.textContent = state ? T("state." + state) : "–";
  el.className = "n state " + (good ? "good" : "danger");
}

// runWithFaults runs fn on a provider with only the given faults (plus the
// quiet defaults), then puts the knobs back as they were.
async function runWithFaults(faults, fn) {
  const saved = await getFaults();
  await putFaults({ ...QUIET, ...faults });
  try { await fn(); } finally { await putFaults(saved); }
}

async function postJSON(url, body) {
  try {
    const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    let json = {};
    try { json = await r.json(); } catch (_) { /* shown by status only */ }
    return { status: r.status, json };
  } catch (_) {
    return { status: 0, json: {} };
  }
}

// ---- The mirror ----

function mirrorMistake() {
  return document.querySelector('input[name="mirror-mistake"]:checked').value;
}

// machine lights the state an event (or the payment) is in.
function machine(id, state) {
  for (const s of document.querySelectorAll("#" + id + " [data-s]")) {
    s.classList.toggle("on", s.dataset.s === state);
    if (s.dataset.s === state) s.classList.add("seen");
  }
}

async function mirrorState(key, ids) {
  const q = new URLSearchParams({ key });
  for (const id of ids) q.append("event", id);
  return (await fetch("/demo/mirror/state?" + q)).json();
}

async function mirror() {
  for (const id of ["mirror-naive-log", "mirror-oncepay-log"]) $("#" + id).replaceChildren();
  for (const id of ["machine-payment", "machine-succeeded", "machine-failed"]) {
    for (const s of document.querySelectorAll("#" + id + " [data-s]")) s.classList.remove("on", "seen");
  }
  setCount("mirror-naive-fulfilled", 0, true);
  setCount("mirror-oncepay-fulfilled", 0, true);
  setState("mirror-naive-state", "", true);
  setState("mirror-oncepay-state", "", true);
  const copies = Math.min(10, Math.max(2, Number($("#mirror-copies").value) || 5));
  const mistake = mirrorMistake();
  const key = crypto.randomUUID();
  const ok = { id: "msg_ok_" + key.slice(0, 8), kind: "succeeded" };
  const bad = { id: "msg_fail_" + key.slice(0, 8), kind: "failed" };

  // 1. The payment, whose answer is lost: the provider charged, the
  // client does not know yet. The provider's own event is held back, so
  // the events below are the ones that arrive.
  await runWithFaults({ fail_after_charge: 1, webhook_delay: "60s" }, async () => {
    const first = await post("/v1/payments", key, PRODUCT);
    say("mirror-oncepay-log", T("mirror.paid", describe(first)), "warn");
    say("mirror-naive-log", T("mirror.naive_paid"), "warn");
  });
  let st = await mirrorState(key, [ok.id, bad.id]);
  machine("machine-payment", st.status);

  // 2. The provider delivers its events: the success, several copies at
  // once, each redelivered until its receiver says done; then the failure,
  // an older fact, late. The provider is slow to answer lookups, so the
  // inbox's states can be watched.
  let polling = true;
  const poller = (async () => {
    while (polling) {
      st = await mirrorState(key, [ok.id, bad.id]);
      renderMirror(st, ok, bad, mistake);
      await sleep(120);
    }
  })();
  await runWithFaults({ latency: "500ms", webhook_delay: "60s" }, async () => {
    say("mirror-oncepay-log", T("mirror.sending", copies));
    say("mirror-naive-log", T("mirror.sending", copies));
    const sends = [];
    for (let i = 1; i <= copies; i++) {
      sends.push(deliverNaive(key, ok, i, mistake));
      sends.push(deliverOncepay(key, ok, i));
    }
    await Promise.all(sends);
    say("mirror-oncepay-log", T("mirror.late"));
    say("mirror-naive-log", T("mirror.late"));
    await Promise.all([deliverNaive(key, bad, 1, mistake), deliverOncepay(key, bad, 1)]);
  });
  polling = false;
  await poller;
  st = await mirrorState(key, [ok.id, bad.id]);
  renderMirror(st, ok, bad, mistake);
  const naiveRight = st.naive.fulfilled === 1 && st.naive.state === "succeeded";
  say("mirror-naive-log", T("mirror.naive_end", st.naive.fulfilled, T("state." + (st.naive.state || "in_progress"))), naiveRight ? "ok" : "bad")
    .dataset.outcome = naiveRight ? "right" : "wrong";
  const right = st.fulfilled === 1 && st.status === "succeeded";
  say("mirror-oncepay-log", T("mirror.oncepay_end", st.fulfilled, T("state." + st.status)), right ? "ok" : "bad")
    .dataset.outcome = right ? "right" : "wrong";
}

function renderMirror(st, ok, bad, mistake) {
  setCount("mirror-naive-fulfilled", st.naive.fulfilled, st.naive.fulfilled <= 1);
  setState("mirror-naive-state", st.naive.state, st.naive.state === "succeeded");
  setCount("mirror-oncepay-fulfilled", st.fulfilled, st.fulfilled <= 1);
  setState("mirror-oncepay-state", st.status, st.status === "succeeded");
  machine("machine-payment", st.status);
  if (st.events[ok.id]) machine("machine-succeeded", st.events[ok.id].state);
  if (st.events[bad.id]) machine("machine-failed", st.events[bad.id].state);
}

function eventName(ev) {
  return T(ev.kind === "succeeded" ? "mirror.event_succeeded" : "mirror.event_failed");
}

async function deliverNaive(key, ev, copy, mistake) {
  const r = await postJSON("/demo/naive/events", { key, kind: ev.kind, event_id: ev.id, mistake });
  const name = eventName(ev);
  if (r.json.duplicate) {
    say("mirror-naive-log", T("mirror.naive_dup", name, copy), "ok");
  } else if (ev.kind === "succeeded") {
    say("mirror-naive-log", T("mirror.naive_fulfil", name, copy), "bad");
  } else {
    say("mirror-naive-log", T("mirror.naive_failed", name, copy), "bad");
  }
}

// deliverOncepay is the provider's sender: it delivers a copy and, while
// the inbox says the outcome is not durable yet, delivers it again. The
// copy whose delivery won the insert by event id claimed the event, even if
// another copy, finding it just received, began applying it first (the
// fence lets one of them) and this one was told busy, then duplicate.
async function deliverOncepay(key, ev, copy) {
  const name = eventName(ev);
  let claimed = false;
  for (let tries = 1; tries <= 8; tries++) {
    const r = await postJSON("/demo/mirror/events", { key, kind: ev.kind, event_id: ev.id });
    const d = r.json;
    claimed ||= r.status === 200 && d.duplicate === false;
    if (r.status !== 200) {
      say("mirror-oncepay-log", T("mirror.error", name, copy, r.status), "err");
    } else if (d.busy) {
      say("mirror-oncepay-log", T("mirror.busy", name, copy), "warn");
    } else if (!d.done) {
      say("mirror-oncepay-log", T("mirror.not_done", name, copy, T("inbox." + d.state)), "warn");
    } else {
      const li = say("mirror-oncepay-log", T(claimed ? "mirror.claimed" : "mirror.dup", name, copy, T("inbox." + d.state)), claimed ? "" : "ok");
      li.dataset.claimed = String(claimed);
      li.dataset.event = ev.kind;
      return;
    }
    await sleep(400);
  }
}

// ---- Refunds racing ----

async function refunds() {
  for (const id of ["refunds-naive-log", "refunds-oncepay-log"]) $("#" + id).replaceChildren();
  const n = Math.min(6, Math.max(2, Number($("#refund-n").value) || 2));
  const amount = 1599; // most of the 19.99 charged
  const payKey = crypto.randomUUID();
  // The bank here pays out whatever it is asked: the merchant's own books
  // are all that stands between two refunds and more out than came in.
  await runWithFaults({ latency: "300ms", no_refund_limit: true }, async () => {
    const [np, op] = await Promise.all([post("/demo/naive/payments?mistake=toctou", payKey, PRODUCT), post("/v1/payments", payKey, PRODUCT)]);
    say("refunds-naive-log", T("refunds.paid", describe(np)), statusClass(np));
    say("refunds-oncepay-log", T("refunds.paid", describe(op)), statusClass(op));
    say("refunds-naive-log", T("refunds.sending", n, euro(amount)));
    say("refunds-oncepay-log", T("refunds.sending", n, euro(amount)));
    const runs = [];
    for (let i = 1; i <= n; i++) {
      runs.push((async () => {
        const r = await postJSON("/demo/naive/refunds", { key: payKey, amount });
        const what = r.status === 201 ? T("refunds.refunded", euro(amount)) : (r.json.type || "").replace("/problems/", "");
        say("refunds-naive-log", T("refunds.answer", i, r.status, what), r.status === 201 ? "ok" : "warn");
      })());
      runs.push((async () => {
        const e = await post("/v1/payments/" + op.id + "/refunds", crypto.randomUUID(), { amount });
        const what = e.status === 201 ? T("refunds.refunded", euro(amount)) : e.type;
        say("refunds-oncepay-log", T("refunds.answer", i, e.status, what), e.status === 201 ? "ok" : "warn").dataset.outcome = e.type || String(e.status);
      })());
    }
    await Promise.all(runs);
    const q = new URLSearchParams();
    q.append("charge", np.charge);
    q.append("charge", op.charge);
    const ledger = await (await fetch("/demo/refunds?" + q)).json();
    const sum = (list) => (list || []).reduce((s, r) => s + r.amount, 0);
    showRefunded("naive", sum(ledger[np.charge]), PRODUCT.amount);
    showRefunded("oncepay", sum(ledger[op.charge]), PRODUCT.amount);
  });
}

function showRefunded(lane, minor, charged) {
  const el = $("#refunds-" + lane + "-total");
  el.textContent = euro(minor);
  el.dataset.minor = String(minor);
  el.className = "n " + (minor > charged ? "danger" : "good");
  const over = minor > charged;
  say("refunds-" + lane + "-log", T(over ? "refunds.over" : "refunds.within", euro(minor), euro(charged)), over ? "bad" : "ok")
    .dataset.outcome = over ? "over" : "within";
}

// ---- The dead link ----

const SALES = [
  { amount: 1999, name: "dead.sale_beans" },
  { amount: 1450, name: "dead.sale_grinder" },
  { amount: 990, name: "dead.sale_cups" },
  { amount: 3500, name: "dead.sale_machine" }, // over the 25.00 a payment the merchant allows offline
];

async function deadLink() {
  for (const id of ["dead-naive-log", "dead-oncepay-log"]) $("#" + id).replaceChildren();
  const keys = SALES.map(() => crypto.randomUUID());
  let refusedNaive = 0, refusedOncepay = 0;
  const taken = [];
  setCount("dead-naive-refused", 0, false);
  setCount("dead-oncepay-refused", 0, true);
  // 1. The link drops: no call reaches the provider.
  await runWithFaults({ fail_before_charge: 1 }, async () => {
    say("dead-naive-log", T("dead.down"), "err");
    say("dead-oncepay-log", T("dead.down"), "err");
    for (let i = 0; i < SALES.length; i++) {
      const body = { amount: SALES[i].amount, currency: "EUR", source: "tok_visa", description: T(SALES[i].name) };
      const [n, o] = await Promise.all([post("/demo/naive/offline/payments", keys[i], body), post("/demo/offline/payments", keys[i], body)]);
      const what = T(SALES[i].name) + " " + euro(SALES[i].amount);
      const shown = (e) => describe(e) + (e.status === 202 ? " · " + T("state.queued") : "");
      say("dead-naive-log", T("dead.sale", what, shown(n)), n.status === 202 ? "warn" : "bad");
      if (n.status !== 202) refusedNaive++;
      const queued = o.status === 202;
      taken[i] = queued;
      if (!queued) refusedOncepay++;
      say("dead-oncepay-log", T(queued ? "dead.sale" : "dead.sale_refused", what, shown(o)), queued ? "warn" : "bad").dataset.outcome = queued ? "queued" : "refused";
    }
  });
  setCount("dead-naive-refused", refusedNaive, false);
  setCount("dead-oncepay-refused", refusedOncepay, refusedOncepay === 1);
  // 2. The link comes back, flaky: the provider charges, its answers are lost.
  await runWithFaults({ fail_after_charge: 1 }, async () => {
    say("dead-naive-log", T("dead.flaky"), "warn");
    say("dead-oncepay-log", T("dead.flaky"), "warn");
    await forwardBoth(keys);
  });
  // 3. The link is back.
  say("dead-naive-log", T("dead.up"), "ok");
  say("dead-oncepay-log", T("dead.up"), "ok");
  await forwardBoth(keys);
  const st = await (await fetch("/demo/offline/payments?" + keys.map((k) => "key=" + k).join("&"))).json();
  for (let i = 0; i < SALES.length; i++) {
    if (st[keys[i]] && taken[i]) say("dead-oncepay-log", T("dead.status", T(SALES[i].name), T("state." + st[keys[i]])), st[keys[i]] === "succeeded" ? "ok" : "warn");
  }
  const counts = await deadCharges(keys);
  const sold = SALES.length - refusedOncepay;
  say("dead-naive-log", T("dead.naive_end", counts.naive, SALES.length), counts.naive > SALES.length ? "bad" : "ok").dataset.outcome = counts.naive > SALES.length ? "wrong" : "right";
  say("dead-oncepay-log", T("dead.oncepay_end", counts.offline, sold), counts.offline === sold ? "ok" : "bad").dataset.outcome = counts.offline === sold ? "right" : "wrong";
}

async function forwardBoth(keys) {
  const [n, o] = await Promise.all([postJSON("/demo/naive/offline/forward", {}), postJSON("/demo/offline/forward", {})]);
  say("dead-naive-log", T("dead.naive_forward", n.json.sent || 0, n.json.kept || 0), n.json.kept ? "warn" : "ok");
  say("dead-oncepay-log", T("dead.forward", o.json.checked || 0, o.json.succeeded || 0, o.json.unknown || 0), o.json.unknown ? "warn" : "ok");
  await deadCharges(keys);
}

async function deadCharges(keys) {
  const q = new URLSearchParams();
  for (const k of keys) { q.append("naive", k); q.append("offline", k); }
  const c = await (await fetch("/demo/charges?" + q)).json();
  const counts = { naive: (c.naive || []).length, offline: (c.offline || []).length };
  setCount("dead-naive-charges", counts.naive, counts.naive <= SALES.length - 1);
  setCount("dead-oncepay-charges", counts.offline, counts.offline <= SALES.length - 1);
  return counts;
}

document.addEventListener("DOMContentLoaded", () => {
  busy($("#mirror-run"), mirror);
  busy($("#refunds-run"), refunds);
  busy($("#dead-run"), deadLink);
});
