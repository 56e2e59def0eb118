module github.com/idem-go/idem/examples/webhooks

go 1.26.0

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2
	github.com/idem-go/idem v0.1.0
	github.com/stripe/stripe-go/v82 v82.5.1
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gowebpki/jcs v1.0.2 // indirect
	github.com/jmespath-community/go-jmespath v1.1.1 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
	golang.org/x/exp v0.0.0-20231110203233-9a3e6036ecaa // indirect
)
