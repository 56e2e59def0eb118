// Package testpb is the gRPC service of idemgrpc's tests.
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative testpb.proto
