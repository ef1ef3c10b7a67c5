package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestForEach(t *testing.T) {
	ctx := context.Background()
	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	var running, peak, sum atomic.Int64
	block := make(chan struct{})
	release := make(chan struct{})
	go func() {
		// Let the first calls pile up against the limit, then release all.
		for range 3 {
			<-block
		}
		close(release)
	}()
	err := ForEach(ctx, 3, items, func(ctx context.Context, i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if i < 3 {
			block <- struct{}{}
			<-release
		}
		sum.Add(int64(i))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 3 || sum.Load() != 49*50/2 {
		t.Fatalf("peak %d calls in flight (want 3), sum %d", peak.Load(), sum.Load())
	}

	boom := errors.New("boom")
	var calls atomic.Int64
	err = ForEach(ctx, 1, items, func(ctx context.Context, i int) error {
		calls.Add(1)
		if i == 5 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if c := calls.Load(); c > 7 {
		t.Fatalf("%d calls after the error at item 5: it goes on", c)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := ForEach(cctx, 2, items, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}
