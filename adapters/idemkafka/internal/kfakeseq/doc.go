// Package kfakeseq holds no code of its own: its test checks package
// sequence's Tracker against a real idempotent producer, by capturing off
// the wire every batch franz-go's producer sends to kfake (franz-go's
// in-process Kafka, made to lose some acknowledgements so the producer
// retries) and requiring the Tracker to flag exactly the retries as
// duplicates, at the offsets the partition holds.
package kfakeseq
