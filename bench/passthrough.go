package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// passthroughMain is system (a), run as a child process so that its CPU
// and memory are its own: `bench passthrough BROKERS IN OUT [BYTES]` copies
// each record's key, value and timestamp from IN to OUT with a
// read_committed consumer and an idempotent producer (linger 5 ms, no
// compression, as weir writes), until SIGTERM: the limit, with no state,
// no transactions and no codec. With BYTES over 0, each value is padded at
// its front to that length (--passthrough-value-bytes).
func passthroughMain(args []string) int {
	if len(args) != 3 && len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bench passthrough BROKERS IN OUT [BYTES]")
		return 2
	}
	var pad []byte
	if len(args) == 4 {
		n, err := strconv.Atoi(args[3])
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "bench passthrough: BYTES %q is not a length\n", args[3])
			return 2
		}
		pad = bytes.Repeat([]byte{'.'}, n)
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
			prod.Produce(ctx, &kgo.Record{Topic: args[2], Key: r.Key, Value: padValue(pad, r.Value), Timestamp: r.Timestamp}, func(_ *kgo.Record, err error) {
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

// padValue is v padded at its front with pad's bytes to len(pad), in a
// buffer of its own; v itself if it is as long already.
func padValue(pad, v []byte) []byte {
	if len(v) >= len(pad) {
		return v
	}
	p := make([]byte, len(pad))
	copy(p[copy(p, pad[:len(pad)-len(v)]):], v)
	return p
}
