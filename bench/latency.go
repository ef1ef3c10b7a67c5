package main

import (
	"context"
	"fmt"
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
	system        string
	samples       int
	p50, p99, max time.Duration
	check         error
}

// latencyRun starts system s on a fresh input topic, writes c.latRate
// records per second into it for c.latFor, and reads the results as they
// become visible. Only records written after the system's first result
// was visible count: its start is not its latency.
func (b *bench) latencyRun(ctx context.Context, s string) (latency, error) {
	name := fmt.Sprintf("bench-%s-latency-%s", s, b.suffix)
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

	n := int64(b.c.latRate) * int64(b.c.latFor/time.Second)
	chk := newChecker(b.c.keys)
	chk.raw = s == "passthrough"
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
			if r.Timestamp.After(first) {
				samples = append(samples, now.Sub(r.Timestamp))
			}
			mu.Unlock()
		})
	}()

	cmd, err := b.start(s, in, out, name, dir)
	if err != nil {
		return latency{}, err
	}
	exited, stop := watch(cmd)
	defer stop()

	// Write at the rate, in 10 ms steps; the producer stamps each record
	// as it is produced.
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(0), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return latency{}, err
	}
	defer prod.Close()
	start := time.Now()
	perStep := float64(b.c.latRate) / 100
	var i int64
	for step := 0; i < n; step++ {
		due := start.Add(time.Duration(step) * 10 * time.Millisecond)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		for ; i < n && float64(i) < perStep*float64(step+1); i++ {
			prod.Produce(ctx, &kgo.Record{Topic: in, Key: []byte("k" + strconv.FormatInt(i%int64(b.c.keys), 10)),
				Value: strconv.AppendInt(nil, i, 10), Headers: padding}, nil)
		}
		select {
		case err := <-exited:
			exited <- err
			return latency{}, fmt.Errorf("the process exited: %v (log in %s)", err, dir)
		default:
		}
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
		return l, fmt.Errorf("no result of a record written after the first result")
	}
	slices.Sort(samples)
	l.p50, l.p99, l.max = samples[len(samples)/2], samples[len(samples)*99/100], samples[len(samples)-1]
	return l, nil
}
