package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// resultBytes is about what one result of the count job takes in a
// produce request (key, value, record overhead): the quota run's input
// rate must write each partition's results faster than the quota lets
// through.
const resultBytes = 50

// unlimited is the producer quota, bytes/s, of the quota run's own input
// writer: above what a broker here takes.
const unlimited = 1 << 40

// A probe asks a system started for a quota run to show its checkpoints or
// commits: weir logs at info (one "checkpoint complete" line each) and
// serves /metrics, Flink serves its REST API at restPort. Kafka Streams
// prints its commits when it stops, probed or not.
type probe struct {
	restPort int // Flink: the port of its REST endpoint on 127.0.0.1
}

// quotaRun is one system's run under the producer quota.
type quotaRun struct {
	system  system
	stats   commitStats
	results int64         // results visible read_committed in the window
	window  time.Duration // from the first result visible to the end
	check   error         // what was visible was not exactly once so far
	err     error         // the run failed: no figures
}

// quota sets a producer quota of c.quotaBytes per client id on the broker
// (the default of every client id; the input's writer has its own,
// unlimited), runs each system but the passthrough under it, and removes
// both again, whatever happens. A run that fails is a quotaRun with its
// error, noted with fail, unless fail says to stop.
func (b *bench) quota(ctx context.Context, fail func(string, error) bool) ([]quotaRun, error) {
	writer := b.writerID()
	// The removals run on a context of their own: a ^C must not leave the
	// broker throttled.
	undo := func(entity ...string) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		args := append([]string{"--delete-config", "producer_byte_rate", "--entity-type", "clients"}, entity...)
		if err := b.configs(uctx, args...); err != nil {
			b.log.Error("could not remove a producer quota: remove it by hand", "err", err,
				"command", "scripts/kafka tool kafka-configs.sh --bootstrap-server "+b.brokers[0]+" --alter "+strings.Join(args, " "))
		}
	}
	if err := b.configs(ctx, "--add-config", fmt.Sprintf("producer_byte_rate=%d", unlimited), "--entity-type", "clients", "--entity-name", writer); err != nil {
		return nil, fmt.Errorf("exempt the input's writer from the quota: %w", err)
	}
	defer undo("--entity-name", writer)
	if err := b.configs(ctx, "--add-config", fmt.Sprintf("producer_byte_rate=%d", b.c.quotaBytes), "--entity-type", "clients", "--entity-default"); err != nil {
		return nil, fmt.Errorf("set the quota: %w", err)
	}
	defer undo("--entity-default")
	b.log.Info("producer quota set", "bytes_per_s", b.c.quotaBytes, "input_records_per_s", b.c.latRate)

	var runs []quotaRun
	for _, s := range b.c.systems {
		if s.kind == "passthrough" {
			continue // no checkpoints, no commits
		}
		q, err := b.quotaOnce(ctx, s)
		if err != nil {
			runs = append(runs, quotaRun{system: s, err: err})
			if fail(s.name+", under the quota", err) {
				return runs, nil
			}
			continue
		}
		b.log.Info("under the quota", "system", s.name, "completed", q.stats.completed, "failed", q.stats.failed,
			"p50", q.stats.p50, "p99", q.stats.p99, "results_per_s", int(float64(q.results)/q.window.Seconds()), "exactly_once_so_far", q.check == nil)
		runs = append(runs, q)
	}
	return runs, nil
}

// writerID is the client id of the quota run's input writer.
func (b *bench) writerID() string { return "weir-bench-writer-" + b.suffix }

// configs runs Kafka's kafka-configs.sh --alter with args on the broker.
func (b *bench) configs(ctx context.Context, args ...string) error {
	args = append([]string{"tool", "kafka-configs.sh", "--bootstrap-server", b.brokers[0], "--alter"}, args...)
	return command(ctx, ".", filepath.Join("scripts", "kafka"), args...)
}

// quotaOnce starts system s on a fresh input topic written at c.latRate
// records per second, lets it run for c.quotaFor from its first result
// visible, and reads what its checkpoints or commits took.
func (b *bench) quotaOnce(ctx context.Context, s system) (quotaRun, error) {
	q := quotaRun{system: s}
	name := fmt.Sprintf("bench-%s-quota-%s", s.slug(), b.suffix)
	in, out := name+"-in", name+"-out"
	dir := filepath.Join(b.dir, name)
	log := filepath.Join(dir, "log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return q, err
	}
	for _, t := range []string{in, out} {
		if err := b.create(ctx, t); err != nil {
			return q, err
		}
	}
	defer b.delete(in, out, name+"-")

	chk := newChecker(b.c.keys)
	var first atomic.Bool // a result is visible
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	reader := make(chan error, 1)
	go func() {
		reader <- b.readEach(rctx, out, func(r *kgo.Record) {
			chk.take(r)
			first.Store(true)
		})
	}()

	p := &probe{}
	if s.kind == "flink" || s.kind == "flink-heap" {
		port, err := freePort()
		if err != nil {
			return q, err
		}
		p.restPort = port
	}
	cmd, err := b.start(s, in, out, name, dir, p)
	if err != nil {
		return q, err
	}
	exited, stop := watch(cmd)
	defer stop()

	prod, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ClientID(b.writerID()), kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return q, err
	}
	defer prod.Close()
	wctx, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = b.writeAt(wctx, prod, in, b.c.latRate, math.MaxInt64, func() error { return nil })
	}()

	// wait waits until done says so or d passed (0: for ever), failing if
	// the process exits or the reader fails.
	wait := func(d time.Duration, done func() bool, why string) error {
		var deadline <-chan time.Time
		if d > 0 {
			deadline = time.After(d)
		}
		for !done() {
			select {
			case err := <-exited:
				exited <- err
				return fmt.Errorf("the process exited: %v (log in %s)", err, dir)
			case err := <-reader:
				return fmt.Errorf("reading the output: %v", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-deadline:
				return fmt.Errorf("%s (log in %s)", why, dir)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	}
	if err := wait(2*time.Minute, first.Load, "no result visible 2 minutes after the start"); err != nil {
		return q, err
	}
	from, fromN := time.Now(), chk.seen()
	if err := wait(0, func() bool { return time.Since(from) >= b.c.quotaFor }, ""); err != nil {
		return q, err
	}
	q.window, q.results = time.Since(from), chk.seen()-fromN

	switch s.kind {
	case "weir", "weir-b":
		q.stats, err = weirStats(ctx, log)
	case "flink", "flink-heap":
		q.stats, err = flinkStats(ctx, p.restPort)
	}
	stopWriting()
	<-written
	stop()
	if s.kind == "kstreams" { // it prints its commits as it stops
		q.stats, err = kstreamsStats(log)
	}
	stopReading()
	<-reader
	if err != nil {
		return q, fmt.Errorf("its checkpoint or commit statistics: %w (log in %s)", err, dir)
	}
	q.check = chk.verifySoFar()
	return q, nil
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
