module github.com/idem-go/idem/adapters/idemgrpc

go 1.26.0

require (
	github.com/idem-go/idem v0.1.0
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
