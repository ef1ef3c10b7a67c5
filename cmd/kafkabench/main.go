// Command kafkabench measures weir against plain franz-go on a real Kafka
// broker, in one run (see internal/kafkabench):
//
//	kafkabench --brokers $(WEIR_KAFKA_DIR=/tmp/weir-kafka-bench scripts/kafka start)
//
// It prints (a) a plain read_committed consume -> produce passthrough's
// records/s, (b) weir's exactly-once count job's records/s until its output
// is visible, their ratio, and (c) produce-to-visible latency percentiles of
// both at a fixed rate. With --nexmark q0,q1,... --processor PATH it runs
// Nexmark queries instead and prints events/s per core. Topics are created
// on the broker with a random suffix and left there: use a scratch broker.
// Exit status 1 on any error.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir/internal/kafkabench"
)

func main() {
	var (
		cfg     kafkabench.Config
		brokers string
		verbose bool
	)
	flag.StringVar(&brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka bootstrap addresses, comma-separated (default $KAFKA_BROKERS)")
	flag.Int64Var(&cfg.Records, "records", 1_000_000, "input records for the throughput runs")
	var partitions int
	flag.IntVar(&partitions, "partitions", 4, "partitions of every topic (= weir tasks)")
	flag.IntVar(&cfg.Keys, "keys", 10_000, "distinct record keys")
	flag.DurationVar(&cfg.Interval, "interval", time.Second, "weir's checkpoint interval")
	flag.IntVar(&cfg.LatencyRate, "latency-rate", 20_000, "records per second of the latency runs")
	flag.DurationVar(&cfg.LatencyDuration, "latency-duration", 20*time.Second, "length of each latency run")
	flag.BoolVar(&verbose, "v", false, "log weir's info messages too (its warnings and errors are always logged)")
	scale := flag.String("scale", "", "instead: run the count job with this many worker processes each, e.g. 1,2,3, and print records/s (needs --processor)")
	processor := flag.String("processor", "", "the processor binary for --scale and --nexmark (go build -o processor ./cmd/processor)")
	queries := flag.String("nexmark", "", "instead: run these Nexmark queries, e.g. q0,q1,q2,q5,q7,q8, each in one worker process over --events events, and print events/s per core (needs --processor)")
	var nc kafkabench.NexmarkConfig
	flag.Int64Var(&nc.Events, "events", 2_000_000, "Nexmark events for --nexmark")
	flag.IntVar(&nc.Runs, "runs", 3, "runs of each query for --nexmark; the median is reported")
	flag.IntVar(&nc.EventRate, "event-rate", 1_000_000, "Nexmark events per second of event time for --nexmark (Flink's Nexmark: its TPS)")
	flag.Parse()
	if brokers == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: kafkabench --brokers host:port [flags]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	cfg.Brokers = strings.Split(brokers, ",")
	cfg.Partitions = int32(partitions)
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.JobLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *queries != "" {
		if *processor == "" {
			fmt.Fprintln(os.Stderr, "kafkabench: --nexmark needs --processor PATH")
			os.Exit(2)
		}
		for _, q := range strings.Split(*queries, ",") {
			nc.Queries = append(nc.Queries, strings.TrimSpace(q))
		}
		gen, runs, err := kafkabench.Nexmark(ctx, cfg, nc, *processor)
		if len(runs) > 0 {
			kafkabench.WriteNexmarkTable(os.Stdout, cfg, nc, gen, runs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kafkabench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *scale != "" {
		var workers []int
		for _, f := range strings.Split(*scale, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "kafkabench: --scale %q: want worker counts like 1,2,3\n", *scale)
				os.Exit(2)
			}
			workers = append(workers, n)
		}
		if *processor == "" {
			fmt.Fprintln(os.Stderr, "kafkabench: --scale needs --processor PATH")
			os.Exit(2)
		}
		runs, err := kafkabench.Scale(ctx, cfg, *processor, workers)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kafkabench: %v\n", err)
			os.Exit(1)
		}
		kafkabench.WriteScaleTable(os.Stdout, cfg, runs)
		return
	}
	res, err := kafkabench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkabench: %v\n", err)
		os.Exit(1)
	}
	res.WriteTable(os.Stdout)
}
