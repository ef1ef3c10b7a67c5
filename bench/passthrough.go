package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// passthroughMain is system (a), run as a child process so that its CPU
// and memory are its own: `bench passthrough BROKERS IN OUT` copies each
// record's key, value and timestamp from IN to OUT with a read_committed consumer and
// an idempotent producer (linger 5 ms, no compression, as weir writes),
// until SIGTERM: the limit, with no state, no transactions and no codec.
func passthroughMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bench passthrough BROKERS IN OUT")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	brokers := strings.Split(args[0], ",")
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(args[1]),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer prod.Close()
	failed := make(chan error, 1)
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Topic: args[2], Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					select {
					case failed <- err:
					default:
					}
				}
			})
		})
		select {
		case err := <-failed:
			fmt.Fprintln(os.Stderr, "produce:", err)
			return 1
		default:
		}
	}
	return 0
}
