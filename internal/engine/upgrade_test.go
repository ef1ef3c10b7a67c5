package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// TestRestoreRefusesRenamedOperators: operator names key a checkpoint. A
// job whose source or keyed operator was renamed must not restore a
// checkpoint of the old names: the source would read its input again, the
// operator would start from empty state. A renamed stateless operator is
// harmless and restores.
func TestRestoreRefusesRenamedOperators(t *testing.T) {
	build := func(source, mapper, counter string) *engine.Plan {
		job := stream.NewJob("upgrade")
		src := stream.Source(job, source, stream.GeneratorSource(1000, func(task int, i int64) int64 { return i }))
		m := stream.Map(src, mapper, func(n int64) (int64, error) { return n, nil })
		keyed := stream.KeyByPartitioned(m, "by-key", func(n int64) uint64 { return uint64(n % 10) }, state.Uint64())
		counts := stream.Process(keyed, counter, func(s *stream.Setup) (stream.Processor[uint64, int64, update], error) {
			count, err := stream.ValueState(s, "count", state.Int64())
			if err != nil {
				return stream.Processor[uint64, int64, update]{}, err
			}
			return stream.Processor[uint64, int64, update]{
				Process: func(ctx *stream.Context[uint64, update], n int64) error {
					c, _, err := count.Get()
					if err != nil {
						return err
					}
					return count.Set(c + 1)
				},
			}, nil
		})
		stream.Sink(counts, "out", newTxnStore[update]().sink())
		plan, err := job.Build()
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	var fails failures
	run := func(storage checkpoint.Storage, plan *engine.Plan, allow bool) error {
		return engine.Run(t.Context(), plan, engine.Config{
			Tasks:                 []int{0},
			Storage:               storage,
			Checkpoint:            checkpoint.Config{Interval: 5 * time.Millisecond},
			StateDir:              t.TempDir(),
			RestartBackoff:        time.Millisecond,
			Observer:              &fails,
			AllowNonRestoredState: allow,
		})
	}
	for _, tc := range []struct {
		source, mapper, counter string
		want                    string
	}{
		{"numbers2", "identity", "count", `positions of source "numbers"`},
		{"numbers", "identity", "count2", `state of operator "count"`},
		{"numbers", "identity2", "count", ""},
	} {
		// The bounded source ends with a final checkpoint.
		storage := checkpoint.NewMemory(checkpoint.MemoryOptions{})
		if err := run(storage, build("numbers", "identity", "count"), false); err != nil {
			t.Fatal(err)
		}
		fails.n.Store(0)
		err := run(storage, build(tc.source, tc.mapper, tc.counter), false)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("renamed stateless operator %s: %v", tc.mapper, err)
		case tc.want != "" && (!errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("source %s, operator %s: %v, want an error naming %s", tc.source, tc.counter, err, tc.want)
		case tc.want != "" && (fails.n.Load() != 1 || fails.restarting.Load()):
			// Restarting cannot make the checkpoint fit: fail once, for good.
			t.Errorf("source %s, operator %s: %d failures (restarting %v), want 1 and no restart", tc.source, tc.counter, fails.n.Load(), fails.restarting.Load())
		}
		// Allowed, the restore drops what the job no longer has.
		if tc.want != "" {
			if err := run(storage, build(tc.source, tc.mapper, tc.counter), true); err != nil {
				t.Errorf("source %s, operator %s, allowing non-restored state: %v", tc.source, tc.counter, err)
			}
		}
	}
}
