// Package nexmark is the Nexmark benchmark on weir: the event model
// (persons, auctions, bids), their Kafka records, a deterministic generator
// of the specification's stream (as Flink's and Beam's Nexmark make it), and
// queries q0, q1, q2, q3, q5, q7 and q8 as stream graphs and as jobs.
//
// Each query Qn is a graph over the stream of Events, with their event
// time (EventTime), to its results. The package registers each as the job
// nexmark-qn for `processor run --job`: it reads the events from
// EventsTopic and writes its results to nexmark-qn-out (--input and
// --output point them elsewhere). Queries that need records of one key
// together that the input keeps apart (q3 and q8 join auctions on their
// seller; q5 and q7 take the most of a window over every task) move them
// with stream.KeyBy, through internal topics under a worker, and event time
// goes on across the move: the jobs' windows are those of the graphs. A
// graph built without Kafka (a test over slices) runs in one task.
//
// Duties of the caller: write the input with Encode (records keyed by
// Event.Key, partitioned with Kafka's default partitioner, which the
// repartition topics use too, so that a person and the auctions
// repartitioned by their seller meet in one task).
package nexmark
