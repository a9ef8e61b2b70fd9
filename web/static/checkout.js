// The checkout side of idempotency, for any checkout page: the key is made
// when the checkout opens and kept in sessionStorage, so a reload or a
// double tap reuses it. Only a new checkout (a new intent) gets a new key.
"use strict";

function checkoutKey(cartId) {
  const name = "oncepay-key-" + cartId;
  let key = sessionStorage.getItem(name);
  if (!key) {
    key = crypto.randomUUID();
    sessionStorage.setItem(name, key);
  }
  return key;
}

// forgetCheckout ends the intent: after a final answer (201, 402, or 409
// key reused), or when the customer starts over.
function forgetCheckout(cartId) {
  sessionStorage.removeItem("oncepay-key-" + cartId);
}
