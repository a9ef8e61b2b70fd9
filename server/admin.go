package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/web"
)

// Admin configures the admin surface: /admin and GET /v1/attempts.
type Admin struct {
	Store      payment.AdminStore
	Reconciler *payment.Reconciler
	// Queue and Forwarder are the forward queue's page and its "forward
	// now", served when Forwarder is set; Link, if set, tells the link's
	// state ("up", "down", "probing").
	Queue     payment.QueueStore
	Forwarder *payment.Forwarder
	Link      func() string
	// Endpoints, if set, serves the endpoints' page and each endpoint's
	// deliveries; with Deliverer, each delivery's "send again" too.
	Endpoints payment.EndpointStore
	Deliverer *payment.Deliverer
	// Token is the admin credential. Empty keeps the admin surface closed,
	// unless Open.
	Token string
	// Open serves the admin surface to anyone, with a banner saying so:
	// demo mode only.
	Open bool
}

const adminPageSize = 50

var adminTemplates = map[string]*template.Template{
	"attempts":  template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/attempts.html")),
	"attempt":   template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/attempt.html")),
	"events":    template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/events.html")),
	"queue":     template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/queue.html")),
	"endpoints": template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/endpoints.html")),
	"endpoint":  template.Must(template.ParseFS(web.Assets, "templates/layout.html", "templates/endpoint.html")),
}

// adminAuth lets through only requests with the admin credential, as HTTP
// Basic (any user name, the token as password: the browser asks for it) or
// as a Bearer token for scripts. Merchant API keys never open it.
func (s *server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Admin.Open {
			next.ServeHTTP(w, r)
			return
		}
		client, now := clientAddr(r), s.Payments.Now()
		if wait := s.adminFailures.wait(client, now); wait > 0 {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeProblem(w, payment.Problem{Type: payment.ProblemTooManyRequests, Title: "Too many failed attempts", Status: http.StatusTooManyRequests,
				Detail: fmt.Sprintf("Too many wrong admin credentials from this address: try again in %d seconds.", secs)})
			return
		}
		if s.adminCredential(r) {
			next.ServeHTTP(w, r)
			return
		}
		// With no token there is nothing to guess, and a request with no
		// credential guesses nothing: a browser's first request has none,
		// and counting it would let anyone lock the admin out of an address.
		if s.Admin.Token != "" && r.Header.Get("Authorization") != "" {
			s.adminFailures.fail(client, now)
		}
		detail := "Send the admin token (HTTP Basic password, or Authorization: Bearer)."
		if s.Admin.Token == "" {
			detail = "The admin page is closed: start oncepay serve with ONCEPAY_ADMIN_TOKEN or --admin-token-file to open it."
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="oncepay admin", charset="UTF-8"`)
		writeProblem(w, payment.Problem{Type: payment.ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
	})
}

func (s *server) adminCredential(r *http.Request) bool {
	if s.Admin.Token == "" {
		return false
	}
	got, ok := bearer(r)
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	// Comparing hashes keeps the comparison constant-time whatever the lengths.
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.Admin.Token))
	return ok && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// adminHeaders: nothing on these pages comes from elsewhere or may be framed,
// and no script runs at all, so a stored payload that slipped past escaping
// still could not execute.
func adminHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// attemptRow is an attempt as the admin page shows it.
type attemptRow struct {
	payment.ListedAttempt
	Stale       bool
	Age         string
	AmountText  string
	StatusText  string
	Fingerprint string
}

func (s *server) row(a payment.ListedAttempt, now time.Time) attemptRow {
	return attemptRow{
		ListedAttempt: a,
		Stale:         a.Stale(now, s.Admin.Reconciler.StaleAfter),
		Age:           age(now.Sub(a.CreatedAt)),
		AmountText:    formatAmount(a.Amount, a.Currency),
		StatusText:    statusText(a.Status),
		Fingerprint:   hex.EncodeToString(a.RequestHash),
	}
}

// statusText is a status as the pages write it.
func statusText(st payment.Status) string {
	return map[payment.Status]string{payment.InProgress: "in progress", payment.Succeeded: "succeeded", payment.Failed: "failed",
		payment.Queued: "queued", payment.Expired: "expired"}[st]
}

type pageBase struct {
	Demo    bool
	Now     time.Time
	Flash   string
	Replica *ReplicaStatus // nil without replication
}

type attemptsPage struct {
	pageBase
	Attempts []attemptRow
	// Counts are each status's number of attempts, "10,000+" past
	// adminCountCap: a page view reads no more of the index than that.
	Counts             map[string]string
	Total              string
	StaleCount         int
	Status, Search     string
	NewerURL, OlderURL string
}

// FilterURL is the list filtered by status, with the search kept.
func (p attemptsPage) FilterURL(status string) string {
	return listURL(status, p.Search, "", "")
}

// adminCountCap is where the admin page stops counting a status.
const adminCountCap = 10000

// countText is n as the page shows it: at the cap, the cap and "+".
func countText(n int, capped bool) string {
	if capped {
		return num(strconv.Itoa(n)) + "+"
	}
	return num(strconv.Itoa(n))
}

// listURL is the admin list with its filters, from one page's edge:
// before (older than that attempt) or after (newer), cursors.
func listURL(status, search, before, after string) string {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if search != "" {
		q.Set("q", search)
	}
	if before != "" {
		q.Set("before", before)
	}
	if after != "" {
		q.Set("after", after)
	}
	if len(q) == 0 {
		return "/admin"
	}
	return "/admin?" + q.Encode()
}

// statusAndLimit reads a list's status filter and its page size, from 1
// to most (absent: def).
func statusAndLimit(q url.Values, def, most int) (payment.Status, int, error) {
	st := payment.Status(q.Get("status"))
	switch st {
	case "", payment.InProgress, payment.Succeeded, payment.Failed, payment.Queued, payment.Expired:
	default:
		return st, 0, payment.Invalidf("status", "status must be in_progress, succeeded, failed, queued or expired.")
	}
	n, err := listLimit(q, def, most)
	return st, n, err
}

// listLimit reads a list's page size: def if none is given, at most most.
func listLimit(q url.Values, def, most int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, payment.Invalidf("limit", "limit must be an integer from 1 to %d.", most)
	}
	return n, nil
}

// listParams reads the filter of the list, the page's and the JSON's.
func listParams(r *http.Request, defaultLimit int) (payment.AttemptFilter, error) {
	q := r.URL.Query()
	f := payment.AttemptFilter{Search: q.Get("q")}
	var err error
	if f.Status, f.Limit, err = statusAndLimit(q, defaultLimit, 500); err != nil {
		return f, err
	}
	if q.Has("offset") {
		return f, payment.Invalidf("offset", "Pages go by cursor, never by offset: use the before or after a page's links give.")
	}
	for _, c := range []struct {
		name string
		dst  **payment.AttemptCursor
	}{{"before", &f.Before}, {"after", &f.After}} {
		if v := q.Get(c.name); v != "" {
			if *c.dst, err = payment.ParseAttemptCursor(v); err != nil {
				return f, payment.Invalidf(c.name, "%s", payment.ErrorMessage(err))
			}
		}
	}
	if f.Before != nil && f.After != nil {
		return f, payment.Invalidf("after", "Give before or after, not both.")
	}
	return f, nil
}

func (s *server) handleAdminList(w http.ResponseWriter, r *http.Request) {
	f, err := listParams(r, adminPageSize)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	f.Limit++ // one more: is there a page past this one?
	list, err := s.Admin.Store.ListAttempts(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, more := pageOf(list, f)
	counts, err := s.Admin.Store.CountsUpTo(r.Context(), adminCountCap)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	stale, err := s.Admin.Store.CountStale(r.Context(), now.Add(-s.Admin.Reconciler.StaleAfter), now)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p := attemptsPage{
		pageBase: s.pageBase(now), StaleCount: stale,
		Counts: map[string]string{},
		Status: string(f.Status), Search: f.Search,
	}
	total, capped := 0, false
	for _, st := range []payment.Status{payment.InProgress, payment.Succeeded, payment.Failed, payment.Queued, payment.Expired} {
		n := counts[st]
		p.Counts[string(st)] = countText(n, n >= adminCountCap)
		total, capped = total+n, capped || n >= adminCountCap
	}
	p.Total = countText(total, capped)
	for _, a := range list {
		p.Attempts = append(p.Attempts, s.row(a, now))
	}
	if len(list) > 0 {
		first, last := payment.CursorOf(list[0].Attempt, f).String(), payment.CursorOf(list[len(list)-1].Attempt, f).String()
		if f.Before != nil || f.After != nil && more {
			p.NewerURL = listURL(p.Status, p.Search, "", first)
		}
		if f.After != nil || more {
			p.OlderURL = listURL(p.Status, p.Search, last, "")
		}
	}
	if q := r.URL.Query(); q.Has("reconciled") {
		p.Flash = fmt.Sprintf("Reconciled %s stale: %s succeeded, %s failed (not completed), %s still unknown.",
			num(q.Get("reconciled")), num(q.Get("succeeded")), num(q.Get("failed")), num(q.Get("unknown")))
	}
	s.render(w, r, "attempts", p)
}

type attemptPage struct {
	pageBase
	A                 attemptRow
	Request, Response string
	Lease             string
	DownstreamKey     string
	// Payment is the payment the attempt made, or the one it refunds; nil
	// once the payment retention has deleted it.
	Payment *paymentPanel
}

// paymentPanel is a payment's money as the detail page shows it: what was
// charged, what went back, and each refund.
type paymentPanel struct {
	ID                                       string
	Status                                   payment.Status
	AmountText, RefundedText, RefundableText string
	ReservedText                             string // "" when no refund is in progress
	Refunds                                  []refundRow
}

// refundRow is one refund of the payment.
type refundRow struct {
	payment.Refund
	Reason     string
	AmountText string
	StatusText string
}

// paymentPanel reads payment id of scope and its refunds; nil if the
// payment is gone (the payment retention).
func (s *server) paymentPanel(r *http.Request, scope, id string) (*paymentPanel, error) {
	p, err := s.Admin.Store.Payment(r.Context(), scope, id)
	if payment.ErrorCode(err) == payment.ENOTFOUND {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refunds, err := s.Admin.Store.Refunds(r.Context(), scope, id)
	if err != nil {
		return nil, err
	}
	panel := &paymentPanel{ID: p.ID, Status: p.Status, AmountText: formatAmount(p.Amount, p.Currency),
		RefundedText: formatAmount(p.AmountRefunded, p.Currency), RefundableText: formatAmount(p.Refundable(), p.Currency)}
	if p.AmountReserved > 0 {
		panel.ReservedText = formatAmount(p.AmountReserved, p.Currency)
	}
	for _, rf := range refunds {
		panel.Refunds = append(panel.Refunds, refundRow{Refund: rf, Reason: rf.View().Reason,
			AmountText: formatAmount(rf.Amount, rf.Currency), StatusText: statusText(rf.Status)})
	}
	return panel, nil
}

func (s *server) handleAdminAttempt(w http.ResponseWriter, r *http.Request) {
	a, err := s.Admin.Store.AttemptByPaymentID(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now := s.now()
	p := attemptPage{
		pageBase: s.pageBase(now), A: s.row(*a, now),
		Request: indent(a.Request), Response: indent(a.ResponseBody),
		Lease: leaseText(&a.Attempt, now), DownstreamKey: payment.DownstreamKey(a.Scope, a.Key),
	}
	paymentID := a.ID
	if a.Kind == payment.KindRefund {
		paymentID, p.DownstreamKey = a.PaymentID, payment.RefundDownstreamKey(a.Scope, a.Key)
	}
	if p.Payment, err = s.paymentPanel(r, a.Scope, paymentID); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch r.URL.Query().Get("reconciled") {
	case "1":
		p.Flash = "Reconciled: the provider was asked, and the attempt is now " + p.A.StatusText + "."
	case "0":
		p.Flash = "Not reconciled: only an attempt in progress past stale-after, with no live lease, can be."
	}
	s.render(w, r, "attempt", p)
}

// handleAdminReconcileOne runs reconcile on one stale attempt, as cron would.
func (s *server) handleAdminReconcileOne(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	a, err := s.Admin.Store.AttemptByPaymentID(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	done := "1"
	if _, err := s.Admin.Reconciler.ReconcileOne(r.Context(), a.Scope, a.Key); payment.ErrorCode(err) == payment.EINVALID {
		done = "0"
	} else if err != nil {
		s.writeError(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/attempts/"+url.PathEscape(id)+"?reconciled="+done, http.StatusSeeOther)
}

// handleAdminReconcileAll runs one reconcile pass now.
func (s *server) handleAdminReconcileAll(w http.ResponseWriter, r *http.Request) {
	res, err := s.Admin.Reconciler.RunOnce(r.Context())
	s.ranJob(w, r, "reconcile", res, err, "/admin", []jobCount{
		{"reconciled", res.Checked}, {"succeeded", res.Succeeded}, {"failed", res.Failed}, {"unknown", res.Unknown}})
}

// jobCount is one count of what a job did, as the page's query names it.
type jobCount struct {
	name string
	n    int
}

// ranJob answers an admin page's "now" button: the job's error, or a
// redirect to page with the counts it did, which the page shows.
func (s *server) ranJob(w http.ResponseWriter, r *http.Request, job string, res fmt.Stringer, err error, page string, counts []jobCount) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.Log.Info("admin: "+job+" now", "result", res.String())
	q := url.Values{}
	for _, c := range counts {
		q.Set(c.name, strconv.Itoa(c.n))
	}
	http.Redirect(w, r, page+"?"+q.Encode(), http.StatusSeeOther)
}

// attemptJSON is an attempt in GET /v1/attempts.
type attemptJSON struct {
	ID                 string         `json:"id"`
	Scope              string         `json:"scope"`
	Merchant           string         `json:"merchant"`
	IdempotencyKey     string         `json:"idempotency_key"`
	Status             payment.Status `json:"status"`
	Stale              bool           `json:"stale"`
	Amount             int64          `json:"amount"`
	Currency           string         `json:"currency"`
	ChargeID           string         `json:"charge_id,omitempty"`
	FailureCode        string         `json:"failure_code,omitempty"`
	ResponseStatus     int            `json:"response_status,omitempty"`
	RequestFingerprint string         `json:"request_fingerprint"`
	LeaseExpiresAt     *time.Time     `json:"lease_expires_at"`
	CreatedAt          time.Time      `json:"created_at"`
	UpdatedAt          time.Time      `json:"updated_at"`
}

// handleListAttempts is GET /v1/attempts: the admin list as JSON.
func (s *server) handleListAttempts(w http.ResponseWriter, r *http.Request) {
	f, err := listParams(r, adminPageSize)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f.Limit++ // one more: is there a page past this one?
	list, err := s.Admin.Store.ListAttempts(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, more := pageOf(list, f)
	now := s.now()
	out := struct {
		Data    []attemptJSON `json:"data"`
		HasMore bool          `json:"has_more"`
		// Next is the before of the next (older) page, after of the next
		// newer one when the page was asked with after.
		Next string `json:"next,omitempty"`
	}{Data: []attemptJSON{}, HasMore: more}
	if more && len(list) > 0 {
		if f.After != nil {
			out.Next = payment.CursorOf(list[0].Attempt, f).String()
		} else {
			out.Next = payment.CursorOf(list[len(list)-1].Attempt, f).String()
		}
	}
	for _, a := range list {
		row := s.row(a, now)
		j := attemptJSON{ID: a.ID, Scope: a.Scope, Merchant: a.Merchant, IdempotencyKey: a.Key, Status: a.Status,
			Stale: row.Stale, Amount: a.Amount, Currency: a.Currency, ChargeID: a.ChargeID, FailureCode: a.FailureCode,
			ResponseStatus: a.ResponseStatus, RequestFingerprint: row.Fingerprint, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
		if !a.LeaseExpiresAt.IsZero() {
			j.LeaseExpiresAt = &a.LeaseExpiresAt
		}
		out.Data = append(out.Data, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) pageBase(now time.Time) pageBase {
	p := pageBase{Demo: s.Admin.Open, Now: now}
	if s.Replica != nil {
		st := s.Replica()
		p.Replica = &st
	}
	return p
}

func (s *server) now() time.Time { return s.Payments.Now().UTC() }

// render executes a page into a buffer first, so a template error is a
// clean 500 rather than half a page.
func (s *server) render(w http.ResponseWriter, r *http.Request, page string, data any) {
	var buf bytes.Buffer
	if err := adminTemplates[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		s.writeError(w, r, fmt.Errorf("render %s: %w", page, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func leaseText(a *payment.Attempt, now time.Time) string {
	switch {
	case a.Status != payment.InProgress:
		return "none (final)"
	case a.LeaseExpiresAt.IsZero():
		return "released: the next retry or reconcile takes it over"
	case a.LeaseLive(now):
		return "held by a live request until " + a.LeaseExpiresAt.Format("15:04:05.000") + " UTC (" + age(a.LeaseExpiresAt.Sub(now)) + " left)"
	}
	return "expired at " + a.LeaseExpiresAt.Format("15:04:05.000") + " UTC: the owner is gone"
}

// indent pretty-prints stored JSON for reading; anything else is shown as is.
func indent(b []byte) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return buf.String()
}

func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// num shows a query parameter only if it is a number: no text from a link
// reaches the page.
func num(s string) string {
	n, err := strconv.Atoi(s)
	if err != nil {
		return "?"
	}
	return strconv.Itoa(n)
}

// minorDigits are ISO 4217's exponents other than 2.
var minorDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}

// formatAmount shows minor units in major units: 1999 EUR is "19.99 EUR".
func formatAmount(amount int64, currency string) string {
	digits, ok := minorDigits[currency]
	if !ok {
		digits = 2
	}
	if digits == 0 {
		return strconv.FormatInt(amount, 10) + " " + currency
	}
	p := int64(1)
	for range digits {
		p *= 10
	}
	return fmt.Sprintf("%d.%0*d %s", amount/p, digits, amount%p, currency)
}

// pageOf is list, asked for f.Limit (one more than a page), as a page:
// without the one past it, and whether there was one.
func pageOf(list []payment.ListedAttempt, f payment.AttemptFilter) ([]payment.ListedAttempt, bool) {
	if len(list) < f.Limit {
		return list, false
	}
	if f.After != nil { // newest first, the one past the page at the top
		return list[1:], true
	}
	return list[:f.Limit-1], true
}
