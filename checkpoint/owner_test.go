package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNextEpochIsMonotonicAndUnique: concurrent allocators never get the
// same epoch, an allocation after another is larger, epochs are at least
// the time, an epoch recorded by hand is allocated above, and old epochs
// are deleted but for the newest.
func TestNextEpochIsMonotonicAndUnique(t *testing.T) {
	ctx := context.Background()
	for name, st := range map[string]Storage{"memory": NewMemory(MemoryOptions{}), "file": mustFile(t)} {
		t.Run(name, func(t *testing.T) {
			start := time.Now().UnixNano()
			var mu sync.Mutex
			var all []int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					var last int64
					for range 10 {
						e, err := NextEpoch(ctx, st, "job")
						if err != nil {
							t.Error(err)
							return
						}
						if e <= last {
							t.Errorf("allocated %d after %d", e, last)
						}
						last = e
						mu.Lock()
						all = append(all, e)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			slices.Sort(all)
			if len(slices.Compact(slices.Clone(all))) != len(all) {
				t.Fatalf("an epoch was allocated twice: %v", all)
			}
			if all[0] < start {
				t.Fatalf("epoch %d below the time %d", all[0], start)
			}
			if e, err := NextEpoch(ctx, st, "job"); err != nil || e <= all[len(all)-1] {
				t.Fatalf("after %d allocations up to %d, the next is %d (%v)", len(all), all[len(all)-1], e, err)
			}
			future := time.Now().Add(time.Hour).UnixNano()
			if err := RecordEpoch(ctx, st, "job", future); err != nil {
				t.Fatal(err)
			}
			if e, err := NextEpoch(ctx, st, "job"); err != nil || e <= future {
				t.Fatalf("after recording %d, allocated %d (%v)", future, e, err)
			}
			// Epochs older than epochsKept go, but never the newest.
			old := time.Now().Add(-2 * epochsKept).UnixNano()
			for _, e := range []int64{old, old + 1} {
				if err := RecordEpoch(ctx, st, "job", e); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := NextEpoch(ctx, st, "job"); err != nil {
				t.Fatal(err)
			}
			names, _ := st.List(ctx, epochsDir("job"))
			for _, n := range names {
				if strings.HasSuffix(n, fmt.Sprintf("%020d", old)) {
					t.Errorf("epoch %d, older than %v, was kept", old, epochsKept)
				}
			}
			if len(names) < 2 {
				t.Errorf("epochs left: %v", names)
			}
		})
	}
}

// Workers whose clocks are minutes off each other still get epochs that
// grow in the order they were allocated, and never the same one twice: an
// epoch is the larger of the clock and the newest in storage plus one, so a
// clock behind only makes it the latter. A clock ahead raises every later
// epoch with it, which fencing does not mind (only the order counts), and
// the newest is never deleted, whatever the deleting worker's clock says.
func TestNextEpochUnderClockSkew(t *testing.T) {
	defer func() { epochClock = time.Now }()
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	var mu sync.Mutex
	skews := []time.Duration{0, 10 * time.Minute, -10 * time.Minute, -time.Minute, 3 * time.Minute, -30 * time.Minute}
	var last int64
	for round := range 20 {
		skew := skews[round%len(skews)]
		mu.Lock()
		epochClock = func() time.Time { return time.Now().Add(skew) }
		mu.Unlock()
		e, err := NextEpoch(ctx, st, "job")
		if err != nil {
			t.Fatal(err)
		}
		if e <= last {
			t.Fatalf("round %d, clock %v off: allocated %d after %d", round, skew, e, last)
		}
		last = e
	}
	// Concurrent allocators with clocks minutes apart: all different.
	var wg sync.WaitGroup
	var all []int64
	var i int
	epochClock = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		i++
		return time.Now().Add(skews[i%len(skews)])
	}
	for range 6 {
		wg.Go(func() {
			for range 10 {
				e, err := NextEpoch(ctx, st, "job")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, e)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(all)
	if len(slices.Compact(slices.Clone(all))) != len(all) || all[0] <= last {
		t.Fatalf("concurrent allocations under skew: %v (after %d)", all, last)
	}
	names, err := st.List(ctx, epochsDir("job"))
	if err != nil || len(names) == 0 || !strings.HasSuffix(names[len(names)-1], fmt.Sprintf("%020d", all[len(all)-1])) {
		t.Fatalf("the newest epoch %d is not in storage: %v (%v)", all[len(all)-1], names, err)
	}
}

// putHook runs hook once, just before the first PutIfAbsent under prefix:
// a caller stalled between its listing and its write (a pause, a slow
// request), while others allocate.
type putHook struct {
	Storage
	prefix string
	hook   func()
}

func (p *putHook) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if h := p.hook; h != nil && strings.HasPrefix(name, p.prefix) {
		p.hook = nil
		h()
	}
	return p.Storage.PutIfAbsent(ctx, name, data)
}

// A clock hours ahead makes the deleting worker take epochs allocated a
// moment ago for an hour old. A caller that listed before such a deletion
// and writes after it must not get the deleted epoch, which another caller
// holds: two owners of one epoch are not told apart.
func TestNextEpochNotReusedUnderHoursOfSkew(t *testing.T) {
	defer func() { epochClock = time.Now }()
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	base := time.Now()
	clock := func(d time.Duration) { epochClock = func() time.Time { return base.Add(d) } }
	next := func(st Storage) int64 {
		t.Helper()
		e, err := NextEpoch(ctx, st, "job")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	clock(2 * time.Hour) // worker F, ahead
	next(st)
	var b, f int64
	stalled := &putHook{Storage: st, prefix: epochsDir("job"), hook: func() {
		clock(0) // worker B
		b = next(st)
		clock(3*time.Hour + 30*time.Minute) // F again: B's epoch is "old"
		next(st)
		f = next(st)
		clock(0)
	}}
	clock(0) // worker A: lists, stalls, writes
	a := next(stalled)
	t.Logf("B %d, F %d, A %d", b, f, a)
	if a == b || a < f {
		t.Fatalf("A got epoch %d after B got %d and F %d: want one larger than both", a, b, f)
	}
}

func mustFile(t *testing.T) *File {
	f, err := NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestClaims(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	for _, e := range []int64{7, 3, 12} {
		if err := Claim(ctx, st, "job", 2, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := Claim(ctx, st, "job", 2, 7); err != nil {
		t.Fatalf("a claim made again (the same owner restarting): %v", err)
	}
	if err := Claim(ctx, st, "job", 3, 99); err != nil {
		t.Fatal(err)
	}
	got, err := Claims(ctx, st, "job", 2)
	if err != nil || !slices.Equal(got, []int64{3, 7, 12}) {
		t.Fatalf("claims of task 2: %v (%v), want [3 7 12]", got, err)
	}
	if err := DropClaimsBelow(ctx, st, "job", 2, 12); err != nil {
		t.Fatal(err)
	}
	if got, _ := Claims(ctx, st, "job", 2); !slices.Equal(got, []int64{12}) {
		t.Fatalf("after dropping below 12: %v", got)
	}
	if got, _ := Claims(ctx, st, "job", 3); !slices.Equal(got, []int64{99}) {
		t.Fatalf("another task's claims changed: %v", got)
	}
	if err := Claim(ctx, st, "job", 2, -1); err == nil {
		t.Fatal("a negative epoch was claimed")
	}
	// Claims are not checkpoints: listing checkpoints ignores them.
	ids, highest, err := ListCheckpoints(ctx, st, "job", 2)
	if err != nil || len(ids) != 0 || highest != 0 {
		t.Fatalf("checkpoints of a task with only claims: %v, highest %d (%v)", ids, highest, err)
	}
}
