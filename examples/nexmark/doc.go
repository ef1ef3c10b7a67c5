// Package nexmark is the Nexmark benchmark on weir: the event model
// (persons, auctions, bids), their Kafka records, a deterministic generator
// of the specification's stream (as Flink's and Beam's Nexmark make it), and
// queries q0, q1, q2, q3, q5, q7 and q8 as stream graphs and as worker jobs.
//
// Each query Qn builds its graph from a source of Events and a sink of its
// results, for runtime.Run; Jobs returns them as jobs for `processor run`,
// reading the events from --input. Queries that need records of one key
// together that the input keeps apart (q3 and q8 join auctions on their
// seller; q5 and q7 take the most of a window over every task) repartition
// in the jobs, and are correct run with runtime.Run only with one task.
// Event time goes on across the hop (see worker.Repartition): the jobs'
// windows are those of the graphs.
//
// Duties of the caller: write the input with Encode (records keyed by
// Event.Key, partitioned with Kafka's default partitioner, which the
// repartition topics use too, so that a person and the auctions
// repartitioned by their seller meet in one task).
package nexmark
