// Package webhooks tests idemhttp receivers against what the senders' own
// libraries send: Stripe events signed by stripe-go's
// webhook.GenerateTestSignedPayload and read with webhook.ConstructEvent,
// keyed by the event's id (idemhttp.KeyFromJSON("id")) and scoped by the
// verified account; and CloudEvents sent by the CloudEvents Go SDK's client
// in binary and structured mode to the SDK's receiver behind
// idemhttp.KeyFromCloudEvents(). Each test counts the effects it causes.
//
// It is a module of its own, never released, so that these SDKs stay out
// of idem's modules (docs/webhooks.md, "Tested with the senders' own
// libraries").
package webhooks
