package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// pacedSource is an unbounded source of 0, 1, 2, ... at about rate records
// per second: a task that keeps working while it is handed off.
type pacedSource struct {
	name string
	next int64
	rate int
	last time.Time
}

func pacedFactory(rate int) engine.SourceFactory[int64] {
	return func(_ context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[int64], error) {
		s := &pacedSource{name: info.Operator, rate: rate, last: time.Now()}
		for _, p := range restored {
			s.next = p.Offset
		}
		return s, nil
	}
}

func (s *pacedSource) Poll(ctx context.Context, b *engine.Batch[int64]) error {
	select {
	case <-time.After(10 * time.Millisecond): // pacing, not waiting for an event
	case <-ctx.Done():
		return ctx.Err()
	}
	now := time.Now()
	n := int64(float64(s.rate) * now.Sub(s.last).Seconds())
	s.last = now
	for range n {
		b.Add(s.next, engine.Position{Source: s.name, Offset: s.next})
		s.next++
	}
	return nil
}

func (s *pacedSource) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: s.name, Offset: s.next}}
}

func (s *pacedSource) Close() error { return nil }

// handoffObserver tells when the task restored and processed its first
// record after a start.
type handoffObserver struct {
	engine.NopObserver
	restored chan time.Time
	first    chan time.Time
}

// send never blocks the runtime; the benchmark reads one of each per start.
func send(ch chan time.Time) {
	select {
	case ch <- time.Now():
	default:
	}
}

func (o *handoffObserver) TaskRestored(string, int, int64, checkpoint.ID, time.Duration) {
	send(o.restored)
}
func (o *handoffObserver) FirstRecord(string, int, time.Duration) { send(o.first) }

// BenchmarkHandoff moves a task with 1 GiB of Pebble state (1M keys, 1 KiB
// incompressible values) between two workers (Runners with state
// directories of their own, sharing the checkpoint storage) while it works
// (10,000 updates per second, 1 s checkpoints): the old owner stops it with
// a final checkpoint (Stop, as on a revoke), then the new one starts it
// (Start, as on an assignment) and restores. Each round is timed from the
// Stop to the new owner's first record, with the stop and the restore
// apart. "fresh" rounds move the task to a worker with an empty state
// directory (everything downloaded); "back" rounds to the worker that ran
// it two moves before (its SSTs still on disk are reused). Reported:
// p50 and p99 of each. WEIR_BENCH_STORAGE=s3 as for RestoreToFirstRecord.
//
//	go test ./runtime -run '^$' -bench Handoff -benchtime 10x -timeout 30m
func BenchmarkHandoff(b *testing.B) {
	const keys, valSize, rate = 1 << 20, 1 << 10, 10_000
	st := benchStorage(b)
	build := func(src engine.SourceFactory[int64]) *engine.Plan {
		return valueStoreJob(b, "handoff", src, keys, valSize, nil)
	}
	// Load the state: every key once, then a final checkpoint.
	start := time.Now()
	load := engine.Config{Tasks: []int{0}, Storage: st, StateDir: b.TempDir(), StateBackend: state.NewPebble(state.PebbleOptions{}),
		Checkpoint: checkpoint.Config{Interval: time.Hour}}
	if err := engine.Run(b.Context(), build(stream.GeneratorSource(keys, func(_ int, i int64) int64 { return i })), load); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d keys of %d bytes in %v", keys, valSize, time.Since(start).Round(time.Millisecond))

	plan := build(pacedFactory(rate))
	obs := &handoffObserver{restored: make(chan time.Time, 1), first: make(chan time.Time, 1)}
	newWorker := func() *engine.Runner {
		r, err := engine.NewRunner(b.Context(), plan, engine.Config{Storage: st, StateDir: b.TempDir(),
			StateBackend: state.NewPebble(state.PebbleOptions{}), Observer: obs, Retained: 3,
			Checkpoint: checkpoint.Config{Interval: time.Second, Timeout: time.Minute}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	epoch := int64(1)
	// startOn starts the task on r and waits for its first record.
	startOn := func(r *engine.Runner) (restored, first time.Time) {
		epoch++
		if err := r.Start(0, epoch); err != nil {
			b.Fatal(err)
		}
		select {
		case restored = <-obs.restored:
		case <-time.After(10 * time.Minute):
			b.Fatal("no restore within 10 minutes")
		}
		return restored, <-obs.first
	}
	workers := []*engine.Runner{newWorker(), newWorker()}
	startOn(workers[0])
	type round struct{ stop, restore, total time.Duration }
	rounds := map[string][]round{}
	i := 0
	for b.Loop() {
		// Work a few checkpoints, then move.
		time.Sleep(3 * time.Second) // the task works meanwhile: the churn of a live task
		from := workers[i%2]
		kind := "back"
		if i < 2 || i%4 >= 2 {
			// A fresh worker in place of the one the task goes to.
			workers[(i+1)%2] = newWorker()
			kind = "fresh"
		}
		to := workers[(i+1)%2]
		t0 := time.Now()
		res := from.Stop(0, time.Minute)
		if !res.Drained {
			b.Fatalf("round %d: stop did not drain: %v", i, res.Err)
		}
		t1 := time.Now()
		restored, first := startOn(to)
		rounds[kind] = append(rounds[kind], round{stop: t1.Sub(t0), restore: restored.Sub(t1), total: first.Sub(t0)})
		b.Logf("round %d (%s): stop %v, restore %v, first record after %v",
			i, kind, t1.Sub(t0).Round(time.Millisecond), restored.Sub(t1).Round(time.Millisecond), first.Sub(t0).Round(time.Millisecond))
		i++
	}
	for _, w := range workers {
		w.Stop(0, time.Minute)
	}
	for kind, rs := range rounds {
		q := func(f func(round) time.Duration, p float64) float64 {
			ds := make([]time.Duration, len(rs))
			for i, r := range rs {
				ds[i] = f(r)
			}
			slices.Sort(ds)
			return ds[min(len(ds)-1, int(p*float64(len(ds))))].Seconds()
		}
		total := func(r round) time.Duration { return r.total }
		b.ReportMetric(q(total, 0.5), fmt.Sprintf("handoff-%s-p50-s", kind))
		b.ReportMetric(q(total, 0.99), fmt.Sprintf("handoff-%s-p99-s", kind))
		b.ReportMetric(q(func(r round) time.Duration { return r.stop }, 0.5), fmt.Sprintf("stop-%s-p50-s", kind))
		b.ReportMetric(q(func(r round) time.Duration { return r.restore }, 0.5), fmt.Sprintf("restore-%s-p50-s", kind))
	}
}
