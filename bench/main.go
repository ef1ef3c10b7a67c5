// Command bench runs one keyed running-count job on weir and on its peers,
// one after another on the same input, on a real Kafka broker, and prints
// their figures side by side:
//
//	go run ./bench --brokers $(scripts/kafka start)
//
// It loads a topic with --records keyed records of about 100 bytes (value
// the record's number, padded by a header), then runs each system --runs
// times on it:
//
//   - passthrough: plain franz-go, read_committed consume -> produce (the
//     limit: no state, no transactions);
//   - weir: `processor run --job count`, exactly-once sink, Pebble state,
//     1 s checkpoints;
//   - flink: the same job on Apache Flink 2.x in one JVM (embedded mini
//     cluster), RocksDB incremental checkpoints every 1 s to a local
//     directory, KafkaSink EXACTLY_ONCE (bench/peers/flink);
//   - kstreams: the same job on Kafka Streams 4.x, exactly_once_v2, a
//     RocksDB store, commits every 1 s, no record cache
//     (bench/peers/kstreams).
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
// Then each system runs once more on a fresh topic written at a fixed rate
// (--latency-rate for --latency-for), and the harness reports the p50 and
// p99 of the time from a record's write (its Kafka timestamp, which each
// system carries to its result) to its result's visibility read_committed,
// over the records written after the system's first result was visible. The peers are Maven projects built
// on first use (mvn package, from Maven Central); nothing downloaded is
// committed. Topics are deleted after each run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
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
	systems := flag.String("systems", "passthrough,weir,flink,kstreams", "systems to run, in order")
	flag.IntVar(&c.latRate, "latency-rate", 20_000, "records per second of the latency runs")
	flag.DurationVar(&c.latFor, "latency-for", 20*time.Second, "length of each system's latency run (0: none)")
	flag.IntVar(&c.restoreMB, "restore-mb", 1000, "megabytes of state of the restore runs of weir and kstreams (0: none)")
	flag.DurationVar(&c.restoreSession, "restore-session-timeout", 6*time.Second, "group session timeout of the restore runs, waited out before each restart")
	flag.StringVar(&c.processor, "processor", "", "the processor binary (default: go build ./cmd/processor)")
	flag.StringVar(&c.dir, "dir", "", "working directory for state and checkpoints (default: a temporary one)")
	flag.DurationVar(&c.interval, "interval", time.Second, "checkpoint interval of weir and Flink, commit interval of Kafka Streams")
	weirFlags := flag.String("weir-flags", "", "more flags of weir's processor, space-separated (e.g. \"--http-addr 127.0.0.1:8089\" to profile it)")
	svg := flag.String("svg", "", "also draw the figures as an SVG chart into this file")
	flag.Parse()
	if c.brokers == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: bench --brokers host:port [flags]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	c.systems = strings.Split(*systems, ",")
	c.weirFlags = strings.Fields(*weirFlags)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, lats, rests, err := run(ctx, c, log)
	if len(rests) > 0 {
		writeRestore(os.Stdout, c, rests)
	}
	if len(lats) > 0 {
		writeLatency(os.Stdout, c, lats)
	}
	if len(res) > 0 {
		writeTable(os.Stdout, c, res)
		if *svg != "" {
			f, ferr := os.Create(*svg)
			if ferr == nil {
				ferr = writeSVG(f, c, res)
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
	systems    []string
	processor  string
	dir        string
	latRate    int           // records/s of the latency runs
	latFor     time.Duration // their length; 0: none
	restoreMB  int           // state of the restore runs, MB; 0: none
	// restoreSession is the session timeout of the restore runs.
	restoreSession time.Duration
	interval       time.Duration // checkpoint or commit interval of every system
	weirFlags      []string      // more flags of weir's processor
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
	}
	return 0, false
}

// result is one run of one system.
type result struct {
	system  string
	records int64         // output records in the measured span
	elapsed time.Duration // the measured span
	cpu     time.Duration // the process's CPU time in it
	rss     int64         // peak resident set, bytes
	total   time.Duration // from start to the whole output visible
	check   error         // the exactly-once check; figures count only if nil
}

func (r result) perSecond() float64 { return float64(r.records) / r.elapsed.Seconds() }

// cpuPerMillion is CPU seconds per million records.
func (r result) cpuPerMillion() float64 { return r.cpu.Seconds() / float64(r.records) * 1e6 }
