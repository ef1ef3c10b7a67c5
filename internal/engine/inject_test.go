package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// injector fails records at points drawn at random among the first total
// records processed (replays count again, so each point fails once).
type injector struct {
	points                  []int64
	processed, next, failed atomic.Int64
}

func newInjector(seed uint64, n int, total int64) *injector {
	rng := rand.New(rand.NewPCG(seed, 0x1a7))
	in := &injector{}
	for range n {
		in.points = append(in.points, rng.Int64N(total))
	}
	slices.Sort(in.points)
	return in
}

// fail is the function a job calls on each record.
func (in *injector) fail() error {
	n := in.processed.Add(1)
	i := in.next.Load()
	if int(i) < len(in.points) && n >= in.points[i] && in.next.CompareAndSwap(i, i+1) {
		in.failed.Add(1)
		return fmt.Errorf("injected failure %d", i+1)
	}
	return nil
}

// failing passes s on, calling fail (if set) on each record first: the
// stage where the tests inject failures.
func failing[T any](s stream.Stream[T], name string, fail func() error) stream.Stream[T] {
	return stream.Map(s, name, func(v T) (T, error) {
		if fail != nil {
			if err := fail(); err != nil {
				return v, err
			}
		}
		return v, nil
	})
}

// run runs plan's tasks 0 and 1 to the end with checkpoints every
// interval, restarting at once after each failure, on Pebble or the memory
// backend, and checks that every failure point was passed.
func (in *injector) run(t *testing.T, plan *engine.Plan, interval time.Duration, pebble bool) {
	t.Helper()
	cfg := engine.Config{
		Tasks:          []int{0, 1},
		Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint:     checkpoint.Config{Interval: interval},
		StateDir:       t.TempDir(),
		RestartBackoff: time.Millisecond,
		MaxRestarts:    -1,
	}
	if pebble {
		cfg.StateBackend = state.NewPebble(state.PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20})
	}
	if err := engine.Run(t.Context(), plan, cfg); err != nil {
		t.Fatal(err)
	}
	if n := in.failed.Load(); int(n) != len(in.points) {
		t.Fatalf("%d failures injected, want %d", n, len(in.points))
	}
}
