// A checkout against oncepay, typed by the OpenAPI document alone: the
// types come from openapi-typescript, the calls from openapi-fetch. It pays
// with one Idempotency-Key per intent and retries with the same key, reads
// the payment, refunds it and lists its refunds, and branches on 402 and
// 409 the way the document says. It compiles under tsc --strict with no
// cast: a change to the document that breaks a client breaks this.
import createClient from "openapi-fetch";
import type { components, operations, paths } from "./schema";

type Payment = components["schemas"]["Payment"];
type Refund = components["schemas"]["Refund"];
type RefundReason = components["schemas"]["RefundRequest"]["reason"];
type PaymentCreated = operations["createPayment"]["responses"][201]["headers"];
type RefundConflict = operations["createRefund"]["responses"][409]["headers"];

export type Outcome =
  | { kind: "paid"; payment: Payment; replayed: boolean; requestId: string }
  | { kind: "declined"; paymentId: string; declineCode?: string }
  | { kind: "key-reused"; detail?: string }
  | { kind: "gave-up"; requestId: string };

const sleep = (seconds: number) => new Promise((done) => setTimeout(done, seconds * 1000));

// headers reads a created payment's headers as the document types them.
function headers(r: Response): PaymentCreated {
  const h: PaymentCreated = { "X-Request-Id": r.headers.get("X-Request-Id") ?? "" };
  if (r.headers.get("Idempotent-Replayed") === "true") {
    h["Idempotent-Replayed"] = "true";
  }
  return h;
}

export function checkout(baseUrl: string, apiKey: string) {
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });

  // pay charges at most once for key, however often it is called: the key
  // names the intent, made once when the checkout opens.
  async function pay(key: string, amount: number, orderId: string): Promise<Outcome> {
    let requestId = "";
    for (let attempt = 0; attempt < 5; attempt++) {
      const { data, error, response } = await client.POST("/v1/payments", {
        params: { header: { "Idempotency-Key": key } },
        body: { amount, currency: "EUR", source: "tok_visa", metadata: { order_id: orderId } },
      });
      if (data) {
        const h = headers(response);
        return { kind: "paid", payment: data, replayed: h["Idempotent-Replayed"] === "true", requestId: h["X-Request-Id"] };
      }
      if (!error) {
        return { kind: "gave-up", requestId }; // the connection failed: retry later, same key
      }
      requestId = response.headers.get("X-Request-Id") ?? requestId;
      switch (error.status) {
        case 402: // final: declined, or abandoned and never charged
          return { kind: "declined", paymentId: error.payment_id, declineCode: error.decline_code };
        case 409:
          if (error.type === "/problems/request-in-progress") {
            await sleep(Number(response.headers.get("Retry-After") ?? "1"));
            continue;
          }
          return { kind: "key-reused", detail: error.detail };
        case 503: // not final: the same key again
          await sleep(Number(response.headers.get("Retry-After") ?? "1"));
          continue;
        default:
          return { kind: "gave-up", requestId };
      }
    }
    return { kind: "gave-up", requestId };
  }

  async function read(id: string): Promise<Payment | undefined> {
    const { data, error } = await client.GET("/v1/payments/{id}", { params: { path: { id } } });
    if (error?.status === 404) {
      return undefined;
    }
    return data;
  }

  // refund gives back amount (all that is left when absent), retrying
  // with the same key while the refund is in progress or its outcome lost.
  async function refund(paymentId: string, key: string, amount?: number, reason?: RefundReason): Promise<Refund | string> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const { data, error, response } = await client.POST("/v1/payments/{id}/refunds", {
        params: { path: { id: paymentId }, header: { "Idempotency-Key": key } },
        body: { amount, reason },
      });
      if (data) {
        return data;
      }
      if (!error) {
        return "no answer";
      }
      switch (error.status) {
        case 402:
          return `not refunded: ${error.type}`;
        case 409: {
          if (error.type !== "/problems/request-in-progress") {
            return `refused: ${error.type}`;
          }
          const wait: RefundConflict["Retry-After"] = Number(response.headers.get("Retry-After") ?? "1");
          await sleep(wait ?? 1);
          continue;
        }
        case 503:
          if (error.type === "/problems/payment-outcome-unknown") {
            // The refund is named, and in progress meanwhile.
            const pending: { refund: string; payment: string } = { refund: error.refund_id, payment: error.payment_id };
            console.log("outcome unknown, retrying", pending);
          }
          await sleep(Number(response.headers.get("Retry-After") ?? "1"));
          continue;
        default:
          return `refused: ${error.type}`;
      }
    }
    return "gave up";
  }

  async function refunds(paymentId: string): Promise<Refund[]> {
    const { data } = await client.GET("/v1/payments/{id}/refunds", { params: { path: { id: paymentId } } });
    return data?.data ?? [];
  }

  return { pay, read, refund, refunds };
}

// A checkout from payment to a second refund with the first one's reason.
export async function example(baseUrl: string, apiKey: string): Promise<void> {
  const shop = checkout(baseUrl, apiKey);
  const key = crypto.randomUUID(); // once per intent, never per attempt
  const outcome = await shop.pay(key, 1999, "42");
  if (outcome.kind !== "paid") {
    console.log(outcome);
    return;
  }
  const paid = await shop.read(outcome.payment.id);
  const first = await shop.refund(outcome.payment.id, crypto.randomUUID(), 500, "requested_by_customer");
  if (typeof first !== "string") {
    await shop.refund(outcome.payment.id, crypto.randomUUID(), undefined, first.reason);
  }
  const all = await shop.refunds(outcome.payment.id);
  console.log(paid?.status, all.map((r) => `${r.id} ${r.amount} ${r.status} ${r.reason ?? ""}`));
}
