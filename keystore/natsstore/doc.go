// Package natsstore is a [keystore.Store] on a NATS JetStream key-value
// bucket: replicated by JetStream's Raft (R3 recommended), so that a key
// store survives the loss of a server without losing an acknowledged write.
//
// Each key is one subject of the bucket's stream, $KV.BUCKET.SCOPE.KEY (the
// scope and the key base64url-encoded, since KV keys allow few
// characters), and its latest message is its record: a lease or a result,
// as a few bytes of its own format. Every write is a publish with
// Nats-Expected-Last-Subject-Sequence (compare-and-set on the key's last
// revision) and a Nats-TTL header (the server expires the message): one
// round trip, atomic on the stream leader, acknowledged once a quorum of
// replicas stored it.
//
//   - Reserve of an absent key publishes a lease expecting revision 0
//     (put-if-absent). Its stream sequence, the key's revision, is the
//     fencing token: sequences of a stream only ever increase, across
//     leader changes too, so a later holder always has a higher token.
//   - Complete publishes the result expecting the claim's token as the
//     last revision, so a holder that was taken over (the revision moved
//     on) writes nothing and gets ErrLeaseLost.
//   - Release publishes a delete marker, fenced the same way.
//
// Clocks are the server's: a lease ends at the lease message's timestamp
// (set by the stream leader) plus the lease, compared with the leader's
// clock (the timestamp of a stream-info reply), and a result's TTL is its
// message's Nats-TTL, counted by the server. The server counts TTLs in
// whole seconds and at least one, so result TTLs are rounded up to whole
// seconds; leases keep millisecond precision. A lease message lives on for
// a grace period after its lease (the lease again, at least a minute) so
// that its successor can report the takeover.
//
// A publish whose ack is lost (a timeout while a leader is elected) is
// sent again with the same Nats-Msg-Id, which JetStream deduplicates, and
// a Reserve also recognises its own lease by a nonce in the record: a
// retry never takes a key twice nor takes over itself.
//
// Failures: with the bucket replicated over three servers, the loss of one
// (even its leader, by kill -9) loses no acknowledged write and repeats no
// token; calls fail (fail closed) during the leader election, a few
// seconds, and succeed again afterwards (docs/scale.md has the numbers).
// Reads go to the stream leader, never to a follower that may be behind.
package natsstore
