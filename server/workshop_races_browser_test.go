package server_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/workshop"
)

// shot writes the element sel (the whole page if "") to docs/workshop/NAME
// when ONCEPAY_SCREENSHOTS is set: how the workshop's pictures are made.
func shot(t *testing.T, ctx context.Context, name, sel string) {
	t.Helper()
	if os.Getenv("ONCEPAY_SCREENSHOTS") == "" {
		return
	}
	var png []byte
	var err error
	if sel == "" {
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	} else {
		png, err = chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "docs", "workshop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// clickAndWait clicks a race's button and waits until its run ended (the
// button is enabled again) and its lanes told the end.
func clickAndWait(t *testing.T, ctx context.Context, button, endLog string) {
	t.Helper()
	run(t, ctx, chromedp.Click(chromedp.ID(button)))
	waitFor(t, ctx, `!document.querySelector("#`+button+`").disabled && document.querySelector("#`+endLog+` li[data-outcome]") !== null`)
}

func pageInt(t *testing.T, ctx context.Context, sel, attr string) int {
	t.Helper()
	return eval[int](t, ctx, `Number(document.querySelector("`+sel+`").dataset.`+attr+`)`)
}

func pageString(t *testing.T, ctx context.Context, js string) string {
	t.Helper()
	return eval[string](t, ctx, js)
}

// The three races after the first, in a real browser, in each language:
// the naive lane's wrong count and oncepay's right one are read from the
// page, and checked against the bank's ledger. Each runs on the API's own
// code: the inbox's claim by event id, the refund's reservation in its
// claim, the offline queue and its forwarder. Then, in the same browser,
// the languages and the handout (checkLanguages).
func TestWorkshopRacesInBrowser(t *testing.T) {
	e := newEnv(t, envOptions{workshop: true})
	ctx := newBrowserFor(t, 3*time.Minute) // two languages, three races each, on a loaded 2-core machine
	refundRaces := 0
	for _, lang := range workshop.Langs {
		t.Run(lang, func(t *testing.T) {
			run(t, ctx, chromedp.Navigate(e.Server.URL+"/demo?lang="+lang))
			waitFor(t, ctx, `document.body.dataset.ready === "true"`)
			if got := pageString(t, ctx, `document.documentElement.lang`); got != lang {
				t.Fatalf("page language = %q, want %q", got, lang)
			}

			t.Run("storm", func(t *testing.T) {
				// The first race, as TestWorkshopInBrowser plays it in English.
				run(t, ctx, chromedp.Click(chromedp.ID("new-checkout")), chromedp.Click(chromedp.ID("fault-lose")))
				for e.Sim.Faults().FailAfterCharge != 1 {
					time.Sleep(10 * time.Millisecond)
				}
				run(t, ctx, chromedp.Click(chromedp.ID("storm")))
				waitFor(t, ctx, `!document.querySelector("#storm").disabled && Number(document.querySelector("#oncepay-count").textContent) === 1 && Number(document.querySelector("#naive-count").textContent) > 1`)
				shot(t, ctx, "storm-"+lang+".png", "#race-payments")
				run(t, ctx, chromedp.Click(chromedp.ID("reset")))
				waitFor(t, ctx, `!document.querySelector("#reset").disabled`)
				for _, id := range []string{"case-reuse", "case-inprogress", "case-crash"} {
					run(t, ctx, chromedp.Click(chromedp.ID(id)))
					waitFor(t, ctx, `!document.querySelector("#`+id+`").disabled && document.querySelectorAll("#`+id+`-log li").length > 1`)
				}
				outcomes := eval[string](t, ctx, `[...document.querySelectorAll("#cases li[data-outcome]")].map(li => li.dataset.outcome).join(" ")`)
				for _, want := range []string{"idempotency-key-reused", "request-in-progress", "succeeded"} {
					if !strings.Contains(outcomes, want) {
						t.Errorf("forgotten cases: outcomes %q, want %q among them", outcomes, want)
					}
				}
				shot(t, ctx, "cases-"+lang+".png", "#cases")
			})

			t.Run("mirror", func(t *testing.T) {
				copies := 5
				clickAndWait(t, ctx, "mirror-run", "mirror-oncepay-log")
				// No dedupe: every copy of "succeeded" sends the goods, and the
				// late "failed" leaves the order failed, though it was paid.
				if n := pageInt(t, ctx, "#mirror-naive-fulfilled", "n"); n != copies {
					t.Errorf("naive: fulfilled %d times, want %d (every copy)", n, copies)
				}
				if s := pageString(t, ctx, `document.querySelector("#mirror-naive-state").dataset.state`); s != "failed" {
					t.Errorf("naive: order %q, want failed (the late event wins)", s)
				}
				if n := pageInt(t, ctx, "#mirror-oncepay-fulfilled", "n"); n != 1 {
					t.Errorf("oncepay: the shop was told %d times, want 1", n)
				}
				if s := pageString(t, ctx, `document.querySelector("#mirror-oncepay-state").dataset.state`); s != "succeeded" {
					t.Errorf("oncepay: payment %q, want succeeded", s)
				}
				claims := eval[int](t, ctx, `document.querySelectorAll('#mirror-oncepay-log li[data-claimed="true"][data-event="succeeded"]').length`)
				if claims != 1 {
					t.Errorf("oncepay: the succeeded event was claimed %d times, want once", claims)
				}
				if on := pageString(t, ctx, `document.querySelector("#machine-succeeded .on").dataset.s + " " + document.querySelector("#machine-failed .on").dataset.s`); on != "processed ignored" {
					t.Errorf("state machine shows %q, want the success processed and the failure ignored", on)
				}
				shot(t, ctx, "mirror-"+lang+".png", "#mirror")
				if lang != "en" {
					return
				}
				// A unique index on the event id: fulfilled once, but the late
				// "failed" still sets the order's state.
				run(t, ctx, chromedp.Click(chromedp.CSS(`input[name="mirror-mistake"][value="index"]`)))
				clickAndWait(t, ctx, "mirror-run", "mirror-oncepay-log")
				if n := pageInt(t, ctx, "#mirror-naive-fulfilled", "n"); n != 1 {
					t.Errorf("naive with a unique index: fulfilled %d times, want 1", n)
				}
				if s := pageString(t, ctx, `document.querySelector("#mirror-naive-state").dataset.state`); s != "failed" {
					t.Errorf("naive with a unique index: order %q, want failed (no state machine)", s)
				}
				if n := pageInt(t, ctx, "#mirror-oncepay-fulfilled", "n"); n != 1 {
					t.Errorf("oncepay: the shop was told %d times, want 1", n)
				}
				run(t, ctx, chromedp.Click(chromedp.CSS(`input[name="mirror-mistake"][value="none"]`)))
			})

			t.Run("refunds", func(t *testing.T) {
				clickAndWait(t, ctx, "refunds-run", "refunds-oncepay-log")
				refundRaces++
				if n := pageInt(t, ctx, "#refunds-naive-total", "minor"); n <= 1999 {
					t.Errorf("naive: the bank refunded %d of 1999, want more than was charged", n)
				}
				if n := pageInt(t, ctx, "#refunds-oncepay-total", "minor"); n != 1599 {
					t.Errorf("oncepay: the bank refunded %d, want one refund of 1599", n)
				}
				outcomes := eval[[]string](t, ctx, `[...document.querySelectorAll("#refunds-oncepay-log li[data-outcome]")].map(li => li.dataset.outcome)`)
				slices.Sort(outcomes)
				if want := []string{"201", "refund-exceeds-remaining", "within"}; !slices.Equal(outcomes, want) {
					t.Errorf("oncepay's refunds = %q, want %q", outcomes, want)
				}
				shot(t, ctx, "refunds-"+lang+".png", "#refunds")
			})

			t.Run("deadlink", func(t *testing.T) {
				clickAndWait(t, ctx, "dead-run", "dead-oncepay-log")
				if n := pageInt(t, ctx, "#dead-naive-charges", "n"); n <= 4 {
					t.Errorf("naive: %d charges for 4 sales, want more (each charged again after a lost answer)", n)
				}
				if n := pageInt(t, ctx, "#dead-naive-refused", "n"); n != 0 {
					t.Errorf("naive: %d sales refused, want none (it has no limit)", n)
				}
				if n := pageInt(t, ctx, "#dead-oncepay-charges", "n"); n != 3 {
					t.Errorf("oncepay: %d charges, want 3 (one per sale taken)", n)
				}
				if n := pageInt(t, ctx, "#dead-oncepay-refused", "n"); n != 1 {
					t.Errorf("oncepay: %d sales refused, want 1 (over the offline limit)", n)
				}
				outcomes := eval[[]string](t, ctx, `[...document.querySelectorAll("#dead-oncepay-log li[data-outcome]")].map(li => li.dataset.outcome)`)
				if want := []string{"queued", "queued", "queued", "refused", "right"}; !slices.Equal(outcomes, want) {
					t.Errorf("oncepay's sales = %q, want %q", outcomes, want)
				}
				shot(t, ctx, "deadlink-"+lang+".png", "#deadlink")
			})

			if text := eval[string](t, ctx, `document.body.innerText`); strings.Contains(text, "⟦") {
				t.Errorf("%s page shows untranslated keys: %q", lang, regexp.MustCompile(`⟦[^⟧]*⟧`).FindAllString(text, -1))
			}
			shot(t, ctx, "workshop-"+lang+".png", "")
		})
	}

	// The same browser, for the pages' languages and the handout.
	t.Run("language", func(t *testing.T) { checkLanguages(t, e, ctx) })

	// What the page showed is what the bank did: no refund past its charge
	// but the naive lane's, once a race.
	var over int
	charged := map[string]int64{}
	for _, c := range mustCharges(t, e) {
		charged[c.ID] = c.Amount
	}
	refunded := map[string]int64{}
	rs, err := e.Sim.Refunds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		refunded[r.ChargeID] += r.Amount
	}
	for id, n := range refunded {
		if n > charged[id] {
			over++
		}
	}
	if over != refundRaces {
		t.Errorf("%d charges refunded past their amount, want %d (the naive lane's only)", over, refundRaces)
	}
}

func mustCharges(t *testing.T, e *env) []payment.Charge {
	t.Helper()
	cs, err := e.Sim.Charges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// words are the page's words of three letters or more, lower-cased.
func words(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range regexp.MustCompile(`[\p{L}']{3,}`).FindAllString(text, -1) {
		out[strings.ToLower(strings.Trim(w, "'"))] = true
	}
	return out
}

// notEnglish are words the Uzbek pages share with the English ones on
// purpose: names, identifiers, and words Uzbek uses too.
var notEnglish = map[string]bool{
	"oncepay": true, "idempotency": true, "key": true, "http": true, "espresso": true, "server": true, "webhook": true,
	"unique": true, "insert": true, "demo": true, "english": true, "o'zbekcha": true, "bank": true, "parallel": true,
}

// checkLanguages: the language switch changes every visible string: the
// Uzbek pages keep no English word but names, identifiers and status
// codes; the choice is remembered; on a phone no page is wider than the
// screen. The handout prints on one A4 page in each language.
func checkLanguages(t *testing.T, e *env, ctx context.Context) {
	for _, page := range []string{"/demo", "/demo/handout"} {
		text := map[string]string{}
		for _, lang := range workshop.Langs {
			run(t, ctx, chromedp.Navigate(e.Server.URL+page+"?lang="+lang))
			waitFor(t, ctx, `document.readyState === "complete"`)
			if page == "/demo/handout" && lang == "uz" {
				shot(t, ctx, "handout-uz.png", "") // before the code is taken out below
			}
			// Identifiers and keys are set in code; the rest is prose.
			text[lang] = eval[string](t, ctx, `document.querySelectorAll("code").forEach(c => c.remove()), document.body.innerText + " " + document.title + " " +
				[...document.querySelectorAll("[title],[aria-label]")].map(el => (el.title || "") + " " + (el.getAttribute("aria-label") || "")).join(" ")`)
			if strings.Contains(text[lang], "⟦") {
				t.Errorf("%s?lang=%s shows untranslated keys", page, lang)
			}
		}
		en, uz := words(text["en"]), words(text["uz"])
		var left []string
		for w := range uz {
			if en[w] && !notEnglish[w] {
				left = append(left, w)
			}
		}
		slices.Sort(left)
		if len(left) > 0 {
			t.Errorf("%s?lang=uz still shows English: %q", page, left)
		}
	}
	// On a phone, in the language with the longer words, nothing is wider
	// than the screen.
	run(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	for _, page := range []string{"/demo", "/demo/handout"} {
		run(t, ctx, chromedp.Navigate(e.Server.URL+page+"?lang=uz"))
		waitFor(t, ctx, `document.readyState === "complete"`)
		if wide := eval[int](t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); wide > 0 {
			t.Errorf("%s on a 390 px phone is %d px wider than the screen", page, wide)
		}
	}
	run(t, ctx, chromedp.Navigate(e.Server.URL+"/demo#mirror"))
	waitFor(t, ctx, `document.readyState === "complete"`)
	shot(t, ctx, "phone-uz.png", "#mirror")
	run(t, ctx, chromedp.EmulateViewport(1280, 900))

	// Remembered: a page with no ?lang is in the language chosen last.
	run(t, ctx, chromedp.Navigate(e.Server.URL+"/demo"))
	waitFor(t, ctx, `document.readyState === "complete"`)
	if got := eval[string](t, ctx, `document.documentElement.lang`); got != "uz" {
		t.Errorf("/demo after ?lang=uz = %q, want uz (the cookie)", got)
	}
	run(t, ctx, chromedp.Click(chromedp.ID("lang-switch")))
	waitFor(t, ctx, `document.readyState === "complete" && document.documentElement.lang === "en"`)

	// The handout prints on one A4 page in each language.
	pageRE := regexp.MustCompile(`/Type\s*/Page\b[^s]`)
	for _, lang := range workshop.Langs {
		run(t, ctx, chromedp.Navigate(e.Server.URL+"/demo/handout?lang="+lang))
		waitFor(t, ctx, `document.readyState === "complete"`)
		pdf, err := chromedp.Run(ctx, chromedp.PrintToPDF(chromedp.PDFPaper(chromedp.PaperA4), chromedp.PDFPreferCSSPageSize()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(pdf, []byte("%PDF-")) {
			t.Fatalf("%s: not a PDF: %.20q", lang, pdf)
		}
		if n := len(pageRE.FindAll(pdf, -1)); n != 1 {
			t.Errorf("handout in %s prints on %d pages, want 1", lang, n)
		}
		if lang == "en" {
			shot(t, ctx, "handout-en.png", "")
		}
	}
}
