package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latency is one system's end-to-end latency at a fixed rate: from a
// record's write (its Kafka timestamp, which every system carries to its
// result) to its result's visibility read_committed.
type latency struct {
	system        system
	samples       int
	p50, p99, max time.Duration
	check         error
	err           error // the run failed: no figures
}

// latencyRun starts system s on a fresh input topic, writes c.latRate
// records per second into it from its start until c.latWarmup plus
// c.latFor after its first result was visible, and reads the results as
// they become visible. Only records written c.latWarmup or more after the
// first result was visible count: its start, and the backlog the start
// left, is not its latency, and every system has c.latFor of samples
// however long it takes to start (a JVM, or 64 tasks).
func (b *bench) latencyRun(ctx context.Context, s system) (latency, error) {
	name := fmt.Sprintf("bench-%s-latency-%s", s.slug(), b.suffix)
	in, out := name+"-in", name+"-out"
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return latency{}, err
	}
	for _, t := range []string{in, out} {
		if err := b.create(ctx, t); err != nil {
			return latency{}, err
		}
	}
	defer b.delete(in, out, name+"-")

	chk := newChecker(b.c.keys)
	chk.raw = s.kind == "passthrough"
	var (
		mu      sync.Mutex
		first   time.Time // the first result's visibility
		samples []time.Duration
	)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	reader := make(chan error, 1)
	go func() {
		reader <- b.readEach(rctx, out, func(r *kgo.Record) {
			now := time.Now()
			chk.take(r)
			mu.Lock()
			if first.IsZero() {
				first = now
			}
			if r.Timestamp.After(first.Add(b.c.latWarmup)) {
				samples = append(samples, now.Sub(r.Timestamp))
			}
			mu.Unlock()
		})
	}()

	cmd, err := b.start(s, in, out, name, dir, nil)
	if err != nil {
		return latency{}, err
	}
	exited, stop := watch(cmd)
	defer stop()

	prod, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return latency{}, err
	}
	defer prod.Close()
	errEnough := errors.New("written for long enough")
	started := time.Now()
	n, err := b.writeAt(ctx, prod, in, b.c.latRate, math.MaxInt64, func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the process exited: %v (log in %s)", err, dir)
		default:
		}
		mu.Lock()
		f := first
		mu.Unlock()
		switch {
		case !f.IsZero() && time.Since(f) >= b.c.latWarmup+b.c.latFor:
			return errEnough
		case f.IsZero() && time.Since(started) > 2*time.Minute:
			return fmt.Errorf("no result visible 2 minutes after the start (log in %s)", dir)
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		return latency{}, err
	}
	if err := prod.Flush(ctx); err != nil {
		return latency{}, err
	}
	deadline := time.After(2 * time.Minute)
	for chk.seen() < n {
		select {
		case err := <-reader:
			return latency{}, fmt.Errorf("reading the output: %v", err)
		case <-deadline:
			return latency{}, fmt.Errorf("%d of %d results visible 2 minutes after the last write (log in %s)", chk.seen(), n, dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // for duplicates
	stopReading()
	<-reader
	mu.Lock()
	defer mu.Unlock()
	l := latency{system: s, samples: len(samples), check: chk.verify(n)}
	if len(samples) == 0 {
		return l, fmt.Errorf("no result of a record written %v or more after the first result", b.c.latWarmup)
	}
	l.p50, l.p99, l.max = percentiles(samples)
	return l, nil
}

// writeAt writes the count job's input to topic at rate records per
// second, in 10 ms steps, the producer stamping each record as it is
// produced: records 0, 1, ... until it has written n or ctx ends. Each
// step calls check first and stops at its error. It returns how many it
// wrote.
func (b *bench) writeAt(ctx context.Context, prod *kgo.Client, topic string, rate int, n int64, check func() error) (int64, error) {
	start := time.Now()
	perStep := float64(rate) / 100
	var i int64
	for step := 0; i < n; step++ {
		due := start.Add(time.Duration(step) * 10 * time.Millisecond)
		select {
		case <-ctx.Done():
			return i, ctx.Err()
		case <-time.After(time.Until(due)):
		}
		if err := check(); err != nil {
			return i, err
		}
		for ; i < n && float64(i) < perStep*float64(step+1); i++ {
			prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte("k" + strconv.FormatInt(i%int64(b.c.keys), 10)),
				Value: strconv.AppendInt(nil, i, 10), Headers: padding}, nil)
		}
	}
	return i, nil
}

// percentiles are the p50, p99 and max of ds, which it sorts: the
// samples at ranks n/2 and n·99/100 (0-based, of n), zero for none.
func percentiles(ds []time.Duration) (p50, p99, most time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
}
