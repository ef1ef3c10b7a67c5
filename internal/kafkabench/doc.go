// Package kafkabench measures weir against plain franz-go on a real Kafka
// broker, in one run, on the same input:
//
//   - throughput of a plain consume -> produce passthrough (read_committed
//     consumer, idempotent non-transactional producer), the ceiling of any
//     Kafka-to-Kafka pipeline on that broker;
//   - throughput of weir's count job (Kafka source, keyed count, exactly-once
//     two-phase-commit sink, checkpoints every interval), until its output is
//     visible to a read_committed reader; and the ratio of the two;
//   - end-to-end latency, produce to visible read_committed, at a fixed
//     moderate rate, of both pipelines.
//
// The count job is examples/count, the one `processor run --job count` runs
// (input key "k<i%K>", value "<i>"; one output record {"key","count","sum"}
// per input record), run here in process.
//
// cmd/kafkabench is the command; Run is everything it does. The caller
// provides a broker it may create topics on; topics are named with a random
// suffix and left behind (the broker is expected to be a scratch one).
package kafkabench
