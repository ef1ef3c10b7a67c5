// Command balance is a complete weir worker for the balance example job,
// and the main to copy for a job of your own: replace balance.Decode,
// balance.Encode and balance.Build with yours.
//
//	go run ./examples/balance/cmd/balance --brokers 127.0.0.1:9092 --input transfers --output balances
//
// Start as many as you like: the workers of a job share its tasks through a
// Kafka consumer group. Every setting is a flag, a WEIR_ variable or a key
// of a --config file (-h lists them); SIGTERM drains (final checkpoint and
// commit); /metrics, /readyz and a status page are served on --http-addr.
package main

import (
	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/worker"
)

func main() {
	worker.Main(worker.Pipeline("balance", balance.Decode, balance.Encode, balance.Build))
}
