// Package remote is a payment.Provider that speaks the simulated provider's
// HTTP API (POST and GET /v1/charges), so oncepay can run against a
// sim-provider process and every fault crosses a real socket.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// maxBody bounds how much of a response is read; a charge is tiny.
const maxBody = 1 << 20

// Client is a payment.Provider over HTTP. It is safe for concurrent use.
type Client struct {
	baseURL string
	hc      *http.Client
}

var (
	_ payment.Provider      = (*Client)(nil)
	_ payment.DisputeLooker = (*Client)(nil)
)

// New returns a client for the provider at baseURL, e.g.
// "http://127.0.0.1:9090". timeout bounds each call end to end; a call that
// runs out of it has an unknown outcome.
func New(baseURL string, timeout time.Duration) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// oncepay has many calls in flight to this one host; the default of 2
	// idle connections per host would make most of them dial anew.
	t.MaxIdleConnsPerHost = 64
	return &Client{
		baseURL: strings.TrimSuffix(baseURL, "/"),
		hc:      &http.Client{Timeout: timeout, Transport: t},
	}
}

// Charge asks the provider to charge once under req.IdempotencyKey. Only a
// 402 with a decline code is a *payment.DeclineError; every other failure,
// including a timeout or a dropped connection, is an unknown outcome.
func (c *Client) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	body, _ := json.Marshal(map[string]any{ // cannot fail: strings and an integer
		"amount":      req.Amount,
		"currency":    req.Currency,
		"source":      req.Source,
		"description": req.Description,
		"payment_id":  req.PaymentID, // carried in the sim's events
	})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return payment.Charge{}, fmt.Errorf("remote: charge: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Idempotency-Key", req.IdempotencyKey)
	status, b, err := c.doOnce(hreq)
	if err != nil {
		return payment.Charge{}, fmt.Errorf("remote: charge: %w", err)
	}
	if status == http.StatusOK {
		return decodeCharge("charge", b)
	}
	return payment.Charge{}, refusal("charge", status, b)
}

// Lookup asks the provider for the charge under req.IdempotencyKey. found is
// false only when the provider itself says it has none.
func (c *Client) Lookup(ctx context.Context, req payment.LookupRequest) (payment.Charge, bool, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/charges", nil)
	if err != nil {
		return payment.Charge{}, false, fmt.Errorf("remote: lookup: %w", err)
	}
	// Set after parsing, so a malformed base URL's error cannot carry the key.
	hreq.URL.RawQuery = url.Values{"idempotency_key": {req.IdempotencyKey}}.Encode()
	status, b, err := c.do(hreq)
	if err != nil {
		return payment.Charge{}, false, fmt.Errorf("remote: lookup: %w", err)
	}
	switch {
	case status == http.StatusOK:
		ch, err := decodeCharge("lookup", b)
		return ch, err == nil, err
	case providerNotFound(status, b):
		return payment.Charge{}, false, nil
	}
	return payment.Charge{}, false, statusError("lookup", status, b)
}

// Refund asks the provider to refund once under req.IdempotencyKey, with
// the same reading of its answers as Charge.
func (c *Client) Refund(ctx context.Context, req payment.ProviderRefundRequest) (payment.ProviderRefund, error) {
	body, _ := json.Marshal(map[string]any{ // cannot fail: strings and an integer
		"charge_id":  req.ChargeID,
		"amount":     req.Amount,
		"currency":   req.Currency,
		"reason":     req.Reason,
		"refund_id":  req.RefundID, // carried in the sim's events
		"payment_id": req.PaymentID,
	})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/refunds", bytes.NewReader(body))
	if err != nil {
		return payment.ProviderRefund{}, fmt.Errorf("remote: refund: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Idempotency-Key", req.IdempotencyKey)
	status, b, err := c.doOnce(hreq)
	if err != nil {
		return payment.ProviderRefund{}, fmt.Errorf("remote: refund: %w", err)
	}
	if status == http.StatusOK {
		return decodeRefund("refund", b)
	}
	return payment.ProviderRefund{}, refusal("refund", status, b)
}

// LookupRefund asks the provider for the refund under req.IdempotencyKey.
func (c *Client) LookupRefund(ctx context.Context, req payment.RefundLookup) (payment.ProviderRefund, bool, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/refunds", nil)
	if err != nil {
		return payment.ProviderRefund{}, false, fmt.Errorf("remote: refund lookup: %w", err)
	}
	hreq.URL.RawQuery = url.Values{"idempotency_key": {req.IdempotencyKey}}.Encode()
	status, b, err := c.do(hreq)
	if err != nil {
		return payment.ProviderRefund{}, false, fmt.Errorf("remote: refund lookup: %w", err)
	}
	switch {
	case status == http.StatusOK:
		r, err := decodeRefund("refund lookup", b)
		return r, err == nil, err
	case providerNotFound(status, b):
		return payment.ProviderRefund{}, false, nil
	case status == http.StatusPaymentRequired: // it holds a refund that gave nothing back
		return payment.ProviderRefund{}, false, refusal("refund lookup", status, b)
	}
	return payment.ProviderRefund{}, false, statusError("refund lookup", status, b)
}

// LookupDispute asks the provider for the dispute id. It implements
// payment.DisputeLooker.
func (c *Client) LookupDispute(ctx context.Context, id string) (payment.ProviderDispute, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/disputes/"+url.PathEscape(id), nil)
	if err != nil {
		return payment.ProviderDispute{}, fmt.Errorf("remote: dispute lookup: %w", err)
	}
	status, b, err := c.do(hreq)
	if err != nil {
		return payment.ProviderDispute{}, fmt.Errorf("remote: dispute lookup: %w", err)
	}
	switch {
	case status == http.StatusOK:
		var d payment.ProviderDispute
		if err := json.Unmarshal(b, &d); err != nil || d.ID == "" {
			return payment.ProviderDispute{}, errors.New("remote: dispute lookup: provider sent no readable dispute")
		}
		return d, nil
	case providerNotFound(status, b):
		return payment.ProviderDispute{}, fmt.Errorf("remote: dispute lookup: %w", payment.ErrNoDispute)
	}
	return payment.ProviderDispute{}, statusError("dispute lookup", status, b)
}

// refusal reads a failed answer to a call that moves money: a decline, a key
// the provider holds for other parameters, or an unknown outcome.
func refusal(op string, status int, b []byte) error {
	var e errorBody
	switch {
	case status == http.StatusPaymentRequired:
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
			return fmt.Errorf("remote: %s: provider status 402 without a decline code", op)
		}
		return &payment.DeclineError{Code: e.Error.Code, Message: e.Error.Message}
	case status == http.StatusConflict && json.Unmarshal(b, &e) == nil && e.Error.Type == "idempotency_error":
		return fmt.Errorf("remote: %s: %w", op, payment.ErrProviderKeyReused)
	}
	return statusError(op, status, b)
}

// providerNotFound reports whether a 404 is the provider's own "none": a
// lookup's "not found" lets reconcile fail an attempt for good, so a 404
// from a wrong URL or a proxy does not count.
func providerNotFound(status int, b []byte) bool {
	var e errorBody
	return status == http.StatusNotFound && json.Unmarshal(b, &e) == nil && e.Error.Type == "not_found"
}

func decodeRefund(op string, b []byte) (payment.ProviderRefund, error) {
	var r payment.ProviderRefund
	if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
		return payment.ProviderRefund{}, fmt.Errorf("remote: %s: provider sent no readable refund", op)
	}
	return r, nil
}

// doOnce sends req, a call that moves money, at most once. With an
// Idempotency-Key header and a body it can rewind, net/http resends a request
// whose reused connection broke before any answer: a lost response would
// reach the provider twice, and only its dedupe, which may be weaker than
// promised, would stand between that and a second charge or refund. Without
// GetBody it cannot resend; the outcome is unknown and oncepay's own retry
// asks the provider first.
func (c *Client) doOnce(req *http.Request) (int, []byte, error) {
	req.GetBody = nil
	return c.do(req)
}

// do sends req and reads the whole response, which also frees the connection
// for reuse.
func (c *Client) do(req *http.Request) (int, []byte, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		// A *url.Error repeats the URL, and a lookup's URL carries the key.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// errorBody is the provider API's error shape.
type errorBody struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeCharge(op string, b []byte) (payment.Charge, error) {
	var ch payment.Charge
	if err := json.Unmarshal(b, &ch); err != nil || ch.ID == "" {
		return payment.Charge{}, fmt.Errorf("remote: %s: provider sent no readable charge", op)
	}
	return ch, nil
}

// statusError describes an answer that is neither a result nor a decline.
// It names the provider's error type, never its message, which may echo
// request data.
func statusError(op string, status int, b []byte) error {
	var e errorBody
	if json.Unmarshal(b, &e) == nil && e.Error.Type != "" {
		return fmt.Errorf("remote: %s: provider status %d (%s)", op, status, e.Error.Type)
	}
	return fmt.Errorf("remote: %s: provider status %d", op, status)
}
