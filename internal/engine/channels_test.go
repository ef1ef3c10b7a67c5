package engine_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// TestChannelSettings: a union and a co-process stay exactly once with the
// smallest channels (one batch of one record, and of seven), through
// failures; negative sizes are refused by name.
func TestChannelSettings(t *testing.T) {
	for _, tc := range []struct{ batch, capacity int }{{1, 1}, {7, 1}} {
		for _, co := range []bool{false, true} {
			const records, keys = 5_000, 13
			var n atomic.Int64
			fail := func() error {
				if c := n.Add(1); c%2_000 == 0 && c <= 6_000 {
					return errors.New("injected")
				}
				return nil
			}
			store := newTxnStore[update]()
			plan := twoInputJob(t, co, records, keys, fail, store.sink())
			err := engine.Run(t.Context(), plan, engine.Config{
				Tasks:           []int{0},
				Storage:         checkpoint.NewMemory(checkpoint.MemoryOptions{}),
				Checkpoint:      checkpoint.Config{Interval: 2 * time.Millisecond},
				StateDir:        t.TempDir(),
				RestartBackoff:  time.Millisecond,
				MaxRestarts:     -1,
				BatchSize:       tc.batch,
				ChannelCapacity: tc.capacity,
			})
			if err != nil {
				t.Fatalf("batch %d, capacity %d, coprocess %v: %v", tc.batch, tc.capacity, co, err)
			}
			checkTwoInputs(t, store.visible(), records, keys)
		}
	}

	cfg := engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), BatchSize: -1, ChannelCapacity: -2}
	err := cfg.Validate("j")
	for _, want := range []string{"batch size: -1", "channel capacity: -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want an error with %q", err, want)
		}
	}
}
