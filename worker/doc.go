// Package worker runs a job built with package stream as a complete weir
// worker process: one call (Main, or Run for more control) and a user's
// main is done.
//
//	import _ "github.com/weirstream/weir/examples/balance" // registers the job "balance"
//
//	func main() { worker.Main() }
//
// The job's package declares its graph and its Kafka topics with package
// stream (stream.Read, stream.Write, stream.Register); the worker gives
// them their brokers, clients and settings, and points the topics where
// --topic, --input and --output say.
//
// What a worker does:
//
//   - Configuration: one Config with documented defaults and Validate,
//     filled from flags (--interval), WEIR_ environment variables
//     (WEIR_INTERVAL) and an optional YAML file (--config; keys are the flag
//     names), in that order of precedence from highest; a bad setting fails
//     at start, naming it (exit code 2).
//   - Tasks: the workers of a job join the Kafka consumer group named after
//     the job and share its tasks (partition p of every input topic), evenly
//     and sticky, cooperatively: a task that moves is stopped by its owner
//     with a final checkpoint within HandoffTimeout before its new owner
//     restores it. Each generation's tasks run with a fencing epoch the
//     group's leader allocated from checkpoint storage. --tasks runs a fixed
//     set instead. See docs/ownership.md.
//   - Restore checks: each task restores its latest valid checkpoint (its
//     pre-committed transactions asked of the transaction coordinator).
//   - Drain: closing Options.Drain (SIGTERM in Main) stops every task with a
//     final checkpoint and commit, then leaves the group.
//   - Observability: the status page, /metrics, /healthz and /readyz on
//     HTTPAddr; logs through log/slog.
//
// Duties of the caller: give every job instance that shares a broker or a
// checkpoint storage its own Config.Name; run the workers of one job with the
// same job, topics and settings; keep the transaction timeout above what
// Validate asks (it says so otherwise).
package worker
