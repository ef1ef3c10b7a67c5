// Command bench runs one keyed running-count job on weir and on its peers,
// one after another on the same input, on a real Kafka broker, and prints
// their figures side by side:
//
//	go run ./bench --brokers $(scripts/kafka start)
//
// It loads a topic with --records keyed records of about 100 bytes (value
// the record's number, padded by a header), then runs each system of
// --systems --runs times on it:
//
//   - passthrough: plain franz-go, read_committed consume -> produce (the
//     limit: no state, no transactions); with --passthrough-value-bytes 42
//     it pads each value it writes to the count job's result's average
//     size, the limit at the same output bytes;
//   - weir: `processor run --job count`, exactly-once sink, Pebble state,
//     checkpoints every --interval;
//   - flink: the same job on Apache Flink 2.x in one JVM (embedded mini
//     cluster), RocksDB incremental checkpoints every --interval to a
//     local directory, KafkaSink EXACTLY_ONCE (bench/peers/flink);
//   - flink-heap: the same, tuned for this job: state on the heap
//     (HashMapStateBackend, full checkpoints) and object reuse;
//   - kstreams: the same job on Kafka Streams 4.x, exactly_once_v2, a
//     RocksDB store, commits every --interval, no record cache
//     (bench/peers/kstreams);
//   - weir-b: weir again, as --processor-b builds it (default: the same
//     binary) with --weir-b-flags: two builds or two settings of weir side
//     by side in one run, its "vs weir" column their ratio.
//
// A system may name its own interval, overriding --interval for it:
// --systems kstreams,kstreams@100ms shows Kafka Streams at 1 s and at its
// exactly-once default, 100 ms, side by side (weir@100ms, flink@50ms
// likewise; the passthrough has none). Every topic has --partitions
// partitions: weir's tasks, Flink's parallelism and task slots (its
// network buffers and managed memory grow with them); Kafka Streams runs
// them in 2 threads. A system that cannot run at that many (or fails
// otherwise) is reported as failed in its table and the others go on.
//
// Each run's output is read read_committed and checked before its figures
// count: every key's counts 1..n exactly once, each with the right sum
// (the passthrough's copies are only counted). A run's figures are of its
// steady state, from the time the first output was visible (the system
// started, its first transaction committed) to the time all of it was:
// records per second, and the process's CPU seconds per million records
// over that span. Up to one commit interval of work done before the span
// counts in it: use enough records that a run lasts many intervals. Peak
// RSS is the process's high-water mark.
//
// Then each system runs once more at each interval of
// --latency-intervals (a system@interval entry at its own only, the
// passthrough once), each on a fresh topic written at a fixed rate
// (--latency-rate) from the system's start until --latency-for after its
// first result was visible, and the harness reports the p50 and p99 of the
// time from a record's write (its Kafka timestamp, which each system
// carries to its result) to its result's visibility read_committed, over
// the records written --latency-warmup or more after the first result was
// visible: --latency-for of them at every system, however long it took to
// start, and none of the backlog its start left.
//
// With --quota-bytes N, a backpressure run follows: the harness sets a
// producer quota of N bytes/s on the broker for every client id
// (kafka-configs.sh through `scripts/kafka tool`, its own input writer
// exempted), runs each system but the passthrough for --quota-for past its
// first result on input written at --latency-rate (which must write each
// partition's results faster than N), and removes the quota again, also
// on failure. It reports each system's checkpoint (weir, Flink) or commit
// (Kafka Streams) durations, p50 and p99, and how many failed: weir's from
// its "checkpoint complete" log lines and its
// weir_checkpoints_aborted_total metric (from /metrics), Flink's from its
// REST endpoint's checkpoint statistics, Kafka Streams' as the peer times
// its producers' commits (see bench/peers/kstreams). A Kafka quota is per
// client id: weir's and Flink's sinks have a producer, so a client id, per
// task or subtask; Kafka Streams one per stream thread, which also writes
// the store's changelog.
//
// The peers are Maven projects built on first use (mvn package, from
// Maven Central); nothing downloaded is committed. Topics are deleted
// after each run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir/internal/proc"
)

func main() {
	if code, child := childMain(os.Args[1:]); child {
		os.Exit(code)
	}
	var c config
	flag.StringVar(&c.brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka bootstrap addresses, comma-separated (default $KAFKA_BROKERS)")
	flag.Int64Var(&c.records, "records", 2_000_000, "input records of the throughput runs (0: none)")
	flag.IntVar(&c.partitions, "partitions", 4, "partitions of every topic (= tasks)")
	flag.IntVar(&c.keys, "keys", 10_000, "distinct keys")
	flag.IntVar(&c.runs, "runs", 3, "runs of each system; the median is reported")
	systems := flag.String("systems", "passthrough,weir,flink,kstreams", "systems to run, in order: passthrough, weir, flink, flink-heap, kstreams, each optionally @INTERVAL (kstreams@100ms)")
	flag.IntVar(&c.latRate, "latency-rate", 20_000, "records per second of the latency runs and of the quota run's input")
	flag.DurationVar(&c.latFor, "latency-for", 20*time.Second, "length of each system's latency run, past its warm-up (0: none)")
	flag.DurationVar(&c.latWarmup, "latency-warmup", 5*time.Second, "time from each system's first result visible to the first record its latency counts (the backlog of its start is not its latency)")
	latIntervals := flag.String("latency-intervals", "1s,100ms,50ms", "intervals each system's latency runs at (empty: --interval)")
	flag.Int64Var(&c.quotaBytes, "quota-bytes", 0, "producer quota, bytes/s per client id, of the backpressure run (0: none)")
	flag.DurationVar(&c.quotaFor, "quota-for", time.Minute, "length of each system's backpressure run, from its first result")
	flag.IntVar(&c.restoreMB, "restore-mb", 1000, "megabytes of state of the restore runs of weir and kstreams (0: none)")
	flag.DurationVar(&c.restoreSession, "restore-session-timeout", 6*time.Second, "group session timeout of the restore runs, waited out before each restart")
	flag.StringVar(&c.processor, "processor", "", "the processor binary (default: go build ./cmd/processor)")
	flag.StringVar(&c.dir, "dir", "", "working directory for state and checkpoints (default: a temporary one)")
	flag.DurationVar(&c.interval, "interval", time.Second, "checkpoint interval of weir and Flink, commit interval of Kafka Streams")
	flag.IntVar(&c.brokerPID, "broker-pid", 0, "the broker's process id, if it runs on this machine (scripts/kafka writes it to $WEIR_KAFKA_DIR/kafka.pid): the throughput runs also report its CPU per million records (0: only the harness's own)")
	weirFlags := flag.String("weir-flags", "", "more flags of weir's processor, space-separated (e.g. \"--http-addr 127.0.0.1:8089\" to profile it)")
	flag.StringVar(&c.processorB, "processor-b", "", "the processor binary of the system weir-b, to compare two builds (default: --processor's)")
	weirBFlags := flag.String("weir-b-flags", "", "more flags of weir-b's processor, space-separated (instead of --weir-flags), to compare two settings")
	flag.IntVar(&c.passthroughBytes, "passthrough-value-bytes", 0, "pad each value the passthrough writes to this many bytes, at its front (0: copy it as read); 45 is the count job's result, to compare the two at the same output bytes")
	svg := flag.String("svg", "", "also draw the figures as an SVG chart into this file")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: bench --brokers host:port [flags]")
		flag.PrintDefaults()
		txnCostUsage(os.Stderr)
	}
	flag.Parse()
	if c.brokers == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if c.systems, err = parseSystems(*systems, c.interval); err == nil {
		c.latIntervals, err = parseIntervals(*latIntervals)
	}
	if err == nil && c.brokerPID != 0 {
		if _, perr := proc.CPU(c.brokerPID); c.brokerPID < 0 || perr != nil {
			err = fmt.Errorf("--broker-pid %d: not a process whose CPU time this machine shows (%v)", c.brokerPID, perr)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	c.weirFlags, c.weirBFlags = strings.Fields(*weirFlags), strings.Fields(*weirBFlags)
	if slices.ContainsFunc(c.systems, func(s system) bool { return s.kind == "weir-b" }) && c.processorB == "" && len(c.weirBFlags) == 0 {
		fmt.Fprintln(os.Stderr, "bench: --systems names weir-b, which is weir itself without --processor-b or --weir-b-flags")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, c, log)
	if len(rep.restores) > 0 {
		writeRestore(os.Stdout, c, rep.restores)
	}
	if len(rep.quotas) > 0 {
		writeQuota(os.Stdout, c, rep.quotas)
	}
	if len(rep.latencies) > 0 {
		writeLatency(os.Stdout, c, rep.latencies)
	}
	if len(rep.results) > 0 {
		writeTable(os.Stdout, c, rep.results)
		writeCores(os.Stdout, c, rep.results)
		if *svg != "" {
			f, ferr := os.Create(*svg)
			if ferr == nil {
				ferr = writeSVG(f, c, rep.results)
				if cerr := f.Close(); ferr == nil {
					ferr = cerr
				}
			}
			if ferr != nil {
				fmt.Fprintf(os.Stderr, "bench: --svg: %v\n", ferr)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

type config struct {
	brokers    string
	records    int64
	partitions int
	keys       int
	runs       int
	systems    []system
	processor  string
	dir        string
	latRate    int           // records/s of the latency runs and the quota run's input
	latFor     time.Duration // their length past the warm-up; 0: none
	latWarmup  time.Duration // from the first result to the first sample
	// latIntervals are the intervals of the latency runs; none: interval.
	latIntervals []time.Duration
	quotaBytes   int64         // the quota run's producer quota, bytes/s per client id; 0: none
	quotaFor     time.Duration // its length per system, from the first result
	restoreMB    int           // state of the restore runs, MB; 0: none
	// restoreSession is the session timeout of the restore runs.
	restoreSession time.Duration
	interval       time.Duration // checkpoint or commit interval of a system that names none
	weirFlags      []string      // more flags of weir's processor
	processorB     string        // weir-b's processor; "": processor
	weirBFlags     []string      // more flags of weir-b's processor
	brokerPID      int           // the broker's process, to measure its CPU; 0: unknown
	// passthroughBytes pads each value the passthrough writes to this many
	// bytes (0: copied as read), so that its output can weigh what the
	// count job's does.
	passthroughBytes int
}

// childMain runs the processes bench starts of itself: `bench
// passthrough ...` and `bench last ...`; child says whether args named
// one.
func childMain(args []string) (code int, child bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "passthrough":
		return passthroughMain(args[1:]), true
	case "last":
		return lastMain(args[1:]), true
	case "txncost":
		return txnCostMain(args[1:]), true
	}
	return 0, false
}

// report is what the runs measured.
type report struct {
	results   []result
	latencies []latency
	quotas    []quotaRun
	restores  []restore
}

// result is one run of one system.
type result struct {
	system  system
	records int64         // output records in the measured span
	elapsed time.Duration // the measured span
	cpu     time.Duration // the process's CPU time in it
	// harnessCPU is the harness's own CPU time in the span: reading and
	// counting the output (the passthrough is a process of its own).
	harnessCPU time.Duration
	brokerCPU  time.Duration // the broker's, if config.brokerPID is set
	rss        int64         // peak resident set, bytes
	total      time.Duration // from start to the whole output visible
	check      error         // the exactly-once check; figures count only if nil
	err        error         // the run failed: no figures
}

// ok says whether the run has figures: it ran and passed the check.
func (r result) ok() bool { return r.err == nil && r.check == nil }

func (r result) perSecond() float64 { return float64(r.records) / r.elapsed.Seconds() }

// cpuPerMillion is CPU seconds per million records.
func (r result) cpuPerMillion() float64 { return perMillion(r.cpu, r.records) }

func perMillion(cpu time.Duration, records int64) float64 {
	return cpu.Seconds() / float64(records) * 1e6
}
