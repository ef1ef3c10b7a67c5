// Package count is the count job: the running count and sum of the numbers
// on every key of a topic. It is the job the kill -9 tests, `processor run
// --job count` and the Kafka benchmark (internal/kafkabench) all run.
//
// Input records have a key such as "k17" and, as value, the decimal text of
// an int64. For every input record the job emits one record keyed by the
// same key, with value {"key":"k17","count":3,"sum":12345}: the key's
// running count and sum after that record. Count and sum live in keyed
// state, so after a crash and a restore from a checkpoint every record still
// counts exactly once.
//
// Build wires the graph from any source and sink, so that the same job runs
// on Kafka (cmd/processor, internal/kafkabench) and in tests on slices. The
// wire format (Decode, Encode) and the operator names are fixed: checkpoints
// and integration tests depend on them.
package count
