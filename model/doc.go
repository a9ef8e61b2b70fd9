// Package model holds oncepay.pml, a Promela model of the payment protocol
// (claim, lease, fence, takeover, the provider call with its downstream key,
// the guarded record, reconcile), refunds.pml, refunds racing on one payment
// through the same flow (the claim that checks and reserves the amount, the
// record that turns the reservation into refunded money or gives it back),
// and the tests that check both exhaustively with spin and keep their step
// tables in step with the Go code.
package model
