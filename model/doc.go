// Package model holds oncepay.pml, a Promela model of the payment protocol
// (claim, lease, fence, takeover, the provider call with its downstream key,
// the guarded record, reconcile), refunds.pml, refunds racing on one payment
// through the same flow (the claim that checks and reserves the amount, the
// record that turns the reservation into refunded money or gives it back),
// forward.pml, the forward queue of a payment taken while the provider was
// unreachable (forwarders that claim it with a lease and a fence, ask the
// provider first, charge only while their lease ends before the max age, and
// settle under their fence, at a provider that does not dedupe),
// deliver.pml, one event's delivery to a merchant's endpoint (deliverers
// that claim it with a lease and a fence, send within their lease, and
// store how the try ended under their fence), and the tests that check all
// four exhaustively with spin and keep their step tables in step with the
// Go code.
package model
