// Package stream is weir's typed job API: a job is a graph built with
// generic functions (Go methods cannot take type parameters), so every edge
// carries a concrete type and no record passes through `any`.
//
//	job := stream.NewJob("balances")
//	transfers := stream.Source(job, "transfers", src)
//	byAccount := stream.KeyBy(transfers, "by-account", func(t Transfer) string { return t.Account }, state.String())
//	balances := stream.Process(byAccount, "balance", newBalance)
//	stream.Sink(balances, "out", sink)
//	plan, err := job.Build()
//
// Duties of the caller: give every operator a name that is unique in the job
// and stable across versions (names identify state in checkpoints); check the
// error of Build, which lists every problem of the graph at once; run the plan
// with runtime.Run.
package stream
