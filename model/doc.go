// Package model holds oncepay.pml, a Promela model of the payment protocol
// (claim, lease, fence, takeover, the provider call with its downstream key,
// the guarded record, reconcile), and the tests that check it exhaustively
// with spin and keep its step table in step with the Go code.
package model
