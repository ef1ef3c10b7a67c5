// Command balance is a complete weir worker for the balance example job,
// and the main to copy for a job of your own: import your job's package
// instead of balance's (its init registers the job with stream.Register).
//
//	go run ./examples/balance/cmd/balance --brokers 127.0.0.1:9092
//
// The job reads "transfers" and writes "balances"; --input and --output
// (or --topic transfers=...) point it at other topics. Start as many as you
// like: the workers of a job share its tasks through a Kafka consumer
// group. Every setting is a flag, a WEIR_ variable or a key of a --config
// file (-h lists them); SIGTERM drains (final checkpoint and commit);
// /metrics, /readyz and a status page are served on --http-addr.
package main

import (
	_ "github.com/weirstream/weir/examples/balance" // registers the job "balance"
	"github.com/weirstream/weir/worker"
)

func main() { worker.Main() }
