// Package stream is weir's job API: a job is a typed dataflow graph built
// with generic functions (Go methods cannot take type parameters), so every
// edge carries a concrete type and no record passes through `any`. A job
// imports stream and the codecs of package state, and nothing else of weir;
// its main is worker.Main.
//
// A job reads Kafka topics and writes Kafka topics, declared in the graph
// with their codecs, and registers itself by name:
//
//	func init() { stream.Register("balances", Build) }
//
//	func Build(job *stream.Job) {
//		transfers := stream.Read(job, "transfers", "transfers", DecodeTransfer)
//		byAccount := stream.KeyByPartitioned(transfers, "by-account", func(t Transfer) string { return t.Account }, state.String())
//		balances := stream.Process(byAccount, "balance", newBalance)
//		stream.Write(balances, "balances", "balances", EncodeBalance)
//	}
//
// The pieces:
//
//   - Read and Write: Kafka topics, read read_committed from each task's
//     checkpointed offsets and written in one Kafka transaction per task
//     and checkpoint, committed when the checkpoint completes (all of a
//     job's writes in that one transaction). The topic names are the job's;
//     a worker points them elsewhere with --topic NAME=TOPIC (--input and
//     --output for a job with one of each). Task p reads partition p of
//     every input topic, so the inputs must share one partition count.
//   - KeyBy keys a stream by any key, moving each record to the task of its
//     key through an internal topic (Flink's keyBy, Kafka Streams'
//     groupBy). KeyByPartitioned keys a stream that is partitioned by the
//     key already (keyed by the Kafka record key) without the move, and the
//     worker checks that on every record (Kafka Streams' groupByKey).
//     LocalKeyBy keys within each task, unchecked: partial state on
//     purpose.
//   - Map, Filter, FlatMap, Union; Process and CoProcess with keyed state
//     (ValueState, ListState, MapState) and timers; event time with
//     ReadWithWatermarks, windows (Aggregate, Reduce, Apply over Tumbling,
//     Sliding and Session) and joins (IntervalJoin, WindowJoin).
//   - Source and Sink take sources and sinks of your own: tests run a
//     job's graph over slices with SliceSource, Collect and RunLocal.
//
// The types a keyed function sees are the engine's, named here by alias;
// their methods:
//
//   - Context: Key, Emit, EmitAt (with an event time), Position (where the
//     record came from), Timestamp (its event time), Now, Watermark, and
//     the timers of the key at hand: RegisterTimer, DeleteTimer
//     (processing time, OnTimer) and RegisterEventTimer, DeleteEventTimer
//     (event time, OnEventTimer).
//   - Setup: the Backend and Scope that ValueState, ListState and MapState
//     declare state in; Task, the task's index.
//   - Emitter: Emit, in a FlatMap.
//   - Batch: Add and Len, in a source of your own's Poll.
//
// Duties of the caller: give every operator a name that is unique in the job
// and stable across versions (names identify state and positions in
// checkpoints); check the error of Build, which lists every problem of the
// graph at once. A graph built without a worker has no Kafka: its reads and
// writes fail Build, and a KeyBy moves nothing, so that its plan runs task
// 0 alone.
package stream
