// The workshop page: one checkout, two lanes, the same clicks and faults.
"use strict";

const PRODUCT = { amount: 1999, currency: "EUR", source: "tok_visa", description: "Espresso beans, 1 kg" };
const CRASH_BODY = { amount: 1999, currency: "EUR", source: "tok_visa", description: "Crashed checkout" };
const STORM = 10;
const LANES = ["naive", "oncepay"];

const $ = (sel) => document.querySelector(sel);

// STRINGS is the page's catalog in its language (web/i18n); T looks a key
// up and fills {0}, {1}... A key the catalog lacks shows as ⟦key⟧, which
// the tests look for.
const STRINGS = JSON.parse(document.getElementById("i18n").textContent);
// euro writes an amount in minor units as the page's language writes money.
function euro(minor) {
  return "€" + (minor / 100).toFixed(2).replace(".", T("num.decimal"));
}

function T(key, ...args) {
  const s = STRINGS[key];
  if (s === undefined) return "\u27e6" + key + "\u27e7";
  return s.replace(/\{(\d)\}/g, (_, i) => String(args[Number(i)]));
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// newKey makes an idempotency key for the naive lane's mistake and the
// forgotten cases; the checkout's own key comes from checkout.js.
function newKey() {
  return crypto.randomUUID();
}

const CART = "workshop";
const state = { key: "", lanes: {} };

// openCheckout shows the current checkout: its key survives a reload.
function openCheckout() {
  state.key = checkoutKey(CART);
  for (const lane of LANES) state.lanes[lane] = { keys: [state.key], log: [] };
  $("#checkout-key").textContent = state.key;
  render();
  refreshLedger();
}

function mistake() {
  return document.querySelector('input[name="mistake"]:checked').value;
}

// post sends one payment attempt and describes what came back.
async function post(url, key, body) {
  const entry = { key, status: "…", started: performance.now() };
  try {
    const r = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    let json = {};
    try { json = JSON.parse(text); } catch (_) { /* not JSON: shown by status only */ }
    entry.status = r.status;
    entry.replayed = r.headers.get("Idempotent-Replayed") === "true";
    entry.retryAfter = r.headers.get("Retry-After");
    entry.type = json.type ? json.type.replace("/problems/", "") : "";
    entry.charge = json.charge_id || "";
    entry.id = json.id || "";
  } catch (err) {
    entry.status = "network error";
  }
  entry.ms = Math.round(performance.now() - entry.started);
  return entry;
}

// attempt is one HTTP attempt of a lane, logged as it happens.
async function attempt(lane, key) {
  const url = lane === "naive" ? "/demo/naive/payments?mistake=" + mistake() : "/v1/payments";
  const entry = { key, status: "…" };
  state.lanes[lane].log.unshift(entry);
  renderLog(lane);
  Object.assign(entry, await post(url, key, PRODUCT));
  renderLog(lane);
  refreshLedger();
  return entry;
}

// final: a 2xx, or a 4xx other than "still in progress". Anything else
// (a 5xx, a lost connection) leaves the outcome unknown: retry.
function final(e) {
  return typeof e.status === "number" && e.status < 500 && !(e.status === 409 && e.type === "request-in-progress");
}

// keyForRetry is where the lanes differ on the client: the naive lane, with
// the "new key" mistake, turns every retry into a new payment.
function keyForRetry(lane) {
  if (lane === "naive" && mistake() === "newkey") {
    const k = newKey();
    state.lanes.naive.keys.push(k);
    return k;
  }
  return state.key;
}

async function pay(lane) {
  const retries = Number($("#retries").value) || 0;
  const delay = Number($("#delay").value) || 0;
  let e = await attempt(lane, state.key);
  for (let i = 0; i < retries && !final(e); i++) {
    await sleep(Math.max(delay, 1000 * (Number(e.retryAfter) || 0)));
    e = await attempt(lane, keyForRetry(lane));
  }
  return e;
}

async function storm() {
  const runs = [];
  for (const lane of LANES) {
    for (let i = 0; i < STORM; i++) runs.push(attempt(lane, i === 0 ? state.key : keyForRetry(lane)));
  }
  await Promise.all(runs);
}

let ledgerTimer = 0;
// refreshLedger asks for the charges of this checkout's keys, at most every
// 150 ms however many attempts finish.
function refreshLedger() {
  if (ledgerTimer) return;
  ledgerTimer = setTimeout(async () => {
    ledgerTimer = 0;
    const q = new URLSearchParams();
    q.append("oncepay", state.key);
    for (const k of state.lanes.naive.keys) q.append("naive", k);
    try {
      const r = await fetch("/demo/charges?" + q);
      const charges = await r.json();
      for (const lane of LANES) renderLedger(lane, charges[lane] || []);
    } catch (_) { /* the next attempt refreshes again */ }
  }, 150);
}

function describe(e) {
  if (e.status === "…") return T("log.waiting");
  if (e.status === "network error") return T("log.network_error");
  const parts = [String(e.status)];
  if (e.replayed) parts.push(T("log.replayed"));
  if (e.type) parts.push(e.type);
  if (e.retryAfter) parts.push("Retry-After " + e.retryAfter);
  if (e.charge) parts.push(e.charge);
  return parts.join(" · ");
}

function statusClass(e) {
  if (typeof e.status !== "number") return e.status === "…" ? "pending" : "err";
  if (e.status < 300) return "ok";
  if (e.status === 409) return "warn";
  return e.status >= 500 ? "err" : "bad";
}

function item(text, cls, title) {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  if (title) li.title = title;
  return li;
}

function renderLog(lane) {
  const ol = $("#" + lane + "-log");
  ol.replaceChildren(...state.lanes[lane].log.map((e) => {
    const li = item(describe(e), statusClass(e), T("log.key", e.key));
    li.dataset.status = String(e.status);
    if (e.replayed) li.dataset.replayed = "true";
    if (e.ms !== undefined) li.append(Object.assign(document.createElement("span"), { className: "ms", textContent: e.ms + " ms" }));
    return li;
  }));
}

function renderLedger(lane, charges) {
  $("#" + lane + "-ledger").replaceChildren(...charges.map((c) =>
    item(c.id + " · " + euro(c.amount) + " · " + T("log.key", c.idempotency_key.slice(0, 22) + "…"))));
  const n = $("#" + lane + "-count");
  n.textContent = String(charges.length);
  n.className = "n " + (charges.length > 1 ? "danger" : charges.length === 1 ? "good" : "");
}

function render() {
  for (const lane of LANES) {
    renderLog(lane);
    renderLedger(lane, []);
  }
  for (const id of ["case-reuse-log", "case-inprogress-log", "case-crash-log"]) $("#" + id).replaceChildren();
}

async function getFaults() {
  return (await fetch("/sim/faults")).json();
}

async function putFaults(f) {
  await fetch("/sim/faults", { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify(f) });
}

function faultsFromKnobs() {
  return {
    latency: $("#fault-slow").checked ? "800ms" : "0s",
    fail_before_charge: $("#fault-before").checked ? 0.5 : 0,
    fail_after_charge: $("#fault-lose").checked ? 1 : 0,
    fail_lookup: 0,
  };
}

// step appends one line to a forgotten case's story.
function step(id, text, cls) {
  const li = item(text, cls);
  $("#" + id).append(li);
  return li;
}

// withFaults runs a forgotten case on a provider with only the given
// faults, then puts the knobs back: each case shows one thing at a time.
async function withFaults(faults, fn) {
  const saved = await getFaults();
  await putFaults({ latency: "0s", fail_before_charge: 0, fail_after_charge: 0, fail_lookup: 0, ...faults });
  try { await fn(); } finally { await putFaults(saved); }
}

async function caseReuse() {
  const id = "case-reuse-log";
  $("#" + id).replaceChildren();
  const key = newKey();
  const first = await post("/v1/payments", key, PRODUCT);
  step(id, T("reuse.first", key.slice(0, 8) + "…", describe(first)), statusClass(first));
  const other = await post("/v1/payments", key, { ...PRODUCT, amount: 2999 });
  step(id, T("reuse.other", describe(other)), statusClass(other)).dataset.outcome = other.type;
}

async function caseInProgress() {
  const id = "case-inprogress-log";
  $("#" + id).replaceChildren();
  const key = newKey();
  step(id, T("inprogress.sent"));
  const firstP = post("/v1/payments", key, PRODUCT);
  await sleep(300);
  const second = await post("/v1/payments", key, PRODUCT);
  step(id, T("inprogress.second", describe(second)), statusClass(second)).dataset.outcome = second.type;
  const first = await firstP;
  step(id, T("inprogress.first", describe(first)), statusClass(first));
}

async function caseCrash() {
  const id = "case-crash-log";
  $("#" + id).replaceChildren();
  const key = newKey();
  const r = await fetch("/demo/crash", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ key }) });
  const crash = await r.json();
  step(id, T("crash.claimed", key.slice(0, 8) + "…", crash.charge_id || T("crash.nothing")), "err");
  const before = await attemptOf(key);
  step(id, T("crash.stuck", before.status) + (before.stale ? " " + T("crash.stale") : ""), "warn").dataset.outcome = before.status;
  const rec = await (await fetch("/demo/reconcile", { method: "POST" })).json();
  step(id, T("crash.reconciled", rec.checked, rec.succeeded, rec.failed, rec.unknown));
  const after = await attemptOf(key);
  step(id, T("crash.now", after.status) + (after.charge_id ? " · " + after.charge_id : ""), after.status === "succeeded" ? "ok" : "bad").dataset.outcome = after.status;
  const retry = await post("/v1/payments", key, CRASH_BODY);
  step(id, T("crash.retry", describe(retry)), statusClass(retry));
}

async function attemptOf(key) {
  const r = await fetch("/v1/attempts?q=" + encodeURIComponent(key) + "&limit=1");
  const list = await r.json();
  return list.data[0] || { status: "missing" };
}

function newCheckout() {
  forgetCheckout(CART);
  openCheckout();
}

async function reset() {
  $("#fault-lose").checked = $("#fault-slow").checked = $("#fault-before").checked = false;
  await putFaults(faultsFromKnobs());
  newCheckout();
}

// busy disables a button while its work runs, so a slow click is not doubled
// by accident (the storm button is the way to double it on purpose).
function busy(button, fn) {
  button.addEventListener("click", async () => {
    button.disabled = true;
    try { await fn(); } finally { button.disabled = false; }
  });
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#storm-n").textContent = String(STORM);
  busy($("#pay"), () => Promise.all(LANES.map(pay)));
  busy($("#storm"), storm);
  $("#new-checkout").addEventListener("click", newCheckout);
  busy($("#reset"), reset);
  busy($("#case-reuse"), () => withFaults({}, caseReuse));
  busy($("#case-inprogress"), () => withFaults({ latency: "1500ms" }, caseInProgress));
  busy($("#case-crash"), () => withFaults({}, caseCrash));
  for (const id of ["#fault-lose", "#fault-slow", "#fault-before"]) $(id).addEventListener("change", () => putFaults(faultsFromKnobs()));
  const f = await getFaults();
  $("#fault-lose").checked = f.fail_after_charge > 0;
  $("#fault-before").checked = f.fail_before_charge > 0;
  $("#fault-slow").checked = f.latency !== "0s";
  openCheckout();
  document.body.dataset.ready = "true";
});
