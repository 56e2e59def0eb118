package idemkafka

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idem-go/idem"
)

// errNoGroup is what a consumer built without kgo.ConsumerGroup fails with.
// franz-go's own refusal ("invalid autocommit options specified when a
// group was not specified") names an option the user never gave (the
// consumer adds it) and not the one to add.
var errNoGroup = fmt.Errorf(`idemkafka: the client has no consumer group: add kgo.ConsumerGroup("…") and kgo.ConsumeTopics(…) to kopts: %w`, idem.ErrInvalidOption)

// clientError explains err, franz-go's refusal of the options all: when
// the options are refused without a consumer group and accepted with one,
// the missing group is the problem and [errNoGroup] says so.
func clientError(all []kgo.Opt, err error) error {
	if noGroup(all) {
		return errNoGroup
	}
	return fmt.Errorf("idemkafka: client: %w: %w", idem.ErrInvalidOption, err)
}

// noGroup reports whether all lacks kgo.ConsumerGroup, with the group
// callbacks every consumer of the package sets, by asking franz-go's own
// validation: the options are refused as they are and accepted once a
// group is added.
func noGroup(all []kgo.Opt) bool {
	with := func(extra ...kgo.Opt) []kgo.Opt { return append(slices.Clip(all), extra...) }
	lost := kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {})
	return kgo.ValidateOpts(with(lost)...) != nil && kgo.ValidateOpts(with(lost, kgo.ConsumerGroup("idem-probe"))...) == nil
}
