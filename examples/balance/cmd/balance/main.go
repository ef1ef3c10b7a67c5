// Command balance runs the balance example job on Kafka: the smallest
// complete weir worker. Copy it and replace balance.Build with your graph.
//
//	go run ./examples/balance/cmd/balance -brokers 127.0.0.1:9092 -input transfers -output balances
//
// The full worker (flags from the environment, metrics, lag commits, restore
// checks) is cmd/processor: `processor run --job balance ...`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap addresses, comma-separated")
	input := flag.String("input", "transfers", "topic of transfers, keyed by account")
	output := flag.String("output", "balances", "topic the balances go to")
	checkpoints := flag.String("checkpoints", "file://"+filepath.Join(os.TempDir(), "weir-checkpoints"), "checkpoint storage URI")
	flag.Parse()
	if err := run(strings.Split(*brokers, ","), *input, *output, *checkpoints); err != nil {
		fmt.Fprintln(os.Stderr, "balance:", err)
		os.Exit(1)
	}
}

func run(brokers []string, input, output, checkpoints string) error {
	// Cancelling stops the tasks; whatever was not checkpointed is redone
	// after the restart, and its output, never committed, is not seen.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// 1. Source and sink. The source reads read_committed and decodes each
	// record; the sink writes each checkpoint's output in one Kafka
	// transaction, committed when the checkpoint completes.
	src, err := source.Kafka(source.Config[balance.Transfer]{
		Brokers: brokers,
		Topics:  []string{input},
		Decode:  balance.Decode,
	})
	if err != nil {
		return err
	}
	out, err := sink.Kafka(sink.Config[balance.Balance]{
		Brokers:            brokers,
		Topic:              output,
		Encode:             balance.Encode,
		TransactionTimeout: time.Minute,
	})
	if err != nil {
		return err
	}

	// 2. The graph: source -> KeyBy(account) -> Process(balance) -> sink.
	job := stream.NewJob("balance")
	balance.Build(job, src, out)
	plan, err := job.Build()
	if err != nil {
		return err
	}

	// 3. One task per input partition, checkpoints to storage.
	parts, err := source.PartitionCount(ctx, brokers, []string{input})
	if err != nil {
		return err
	}
	tasks := make([]int, parts)
	for i := range tasks {
		tasks[i] = i
	}
	storage, err := checkpoint.Open(ctx, checkpoints)
	if err != nil {
		return err
	}
	cfg := runtime.Config{
		Tasks:      tasks,
		Storage:    storage,
		Checkpoint: checkpoint.Config{Interval: time.Second, Timeout: 30 * time.Second, TolerableFailures: 2},
		// A fencing epoch that grows across restarts.
		Epoch:  time.Now().UnixNano(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("job", plan.Name()),
	}
	// The pre-committed transaction of a checkpoint must outlive the
	// checkpoints that may fail after it, or a restore finds it aborted.
	if err := sink.CheckTimeout(time.Minute, cfg.Checkpoint.Interval, cfg.Checkpoint.TolerableFailures, 30*time.Second); err != nil {
		return err
	}

	// 4. Run until the context is cancelled or a task fails for good.
	return runtime.Run(ctx, plan, cfg)
}
