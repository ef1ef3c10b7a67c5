package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// TestPebbleDeltasAgainstMemory runs the Pebble backend beside the memory
// one on a random mix of mostly value-state operations, so that most of
// its snapshots are deltas (the model test's lists and maps write Pebble
// itself, which makes nearly every snapshot a base): snapshots taken with
// their cut held, uploaded in any order, some abandoned, some failing in
// storage, restored in place and afresh, each restore compared with the
// memory backend's restore of the same checkpoint. A run with the default
// cache must have restored chains with deltas, or it tested bases only.
func TestPebbleDeltasAgainstMemory(t *testing.T) {
	seed := testSeed(t)
	for _, cut := range pebbleCuts {
		// The default cache (0: 1 MiB), which holds every key, and one
		// that overflows now and then (which makes the next a base).
		for _, cache := range []int{0, 4096} {
			// Deltas held in memory (the default), each written to a
			// file (-1), and some of each (200 bytes).
			for _, dm := range []int64{0, -1, 200} {
				t.Run(fmt.Sprintf("%v/cache-%d/delta-memory-%d", cut, cache, dm), func(t *testing.T) {
					deltaRun(t, rand.New(rand.NewPCG(seed, uint64(cache)+uint64(dm))), 600, PebbleOptions{Cut: cut, valueCache: cache, DeltaMemory: dm})
				})
			}
		}
	}
}

func deltaRun(t *testing.T, r *rand.Rand, steps int, opts PebbleOptions) {
	ctx := context.Background()
	st := &failingPuts{fakeStorage: newFakeStorage()}
	names := []string{"va", "vb", "vc", "la", "ma"}
	universe := slices.Clone(trickyKeys)
	for i := range 60 {
		universe = append(universe, strconv.Itoa(i))
	}
	opts.MemTableSize, opts.CacheSize = 64<<10, 1<<20
	open := func() memoryAndPebble { return memoryAndPebble{OpenMemory(MemoryOptions{}), openTestPebble(t, opts)} }
	declare := func(b Backend) { declareShuffled(t, r, b, names) }
	cur := open()
	declare(cur.mem)
	declare(cur.peb)
	var gates []chan struct{}
	openGates := func() {
		for _, g := range gates {
			close(g)
		}
		gates = nil
	}
	defer openGates()
	type snap struct {
		mem, peb Snapshot
		id       checkpoint.ID
	}
	type done struct {
		mem, peb checkpoint.StateHandle
		id       checkpoint.ID
	}
	var out []snap
	var uploaded []done
	var id checkpoint.ID
	var nDelta, nBase, restoredDeltas int
	key := func() []byte { return []byte(universe[r.IntN(len(universe))]) }
	val := func() []byte { return []byte(strings.Repeat(strconv.Itoa(r.IntN(1000)), r.IntN(40))) }
	both := func(fn func(b Backend)) { fn(cur.mem); fn(cur.peb) }
	pick := func(kind string) string {
		if kind == "v" {
			return kind + []string{"a", "b", "c"}[r.IntN(3)]
		}
		return kind + "a"
	}
	check := func(step int, what string, b Backend, m Backend) {
		got, want := dumpKeys(t, b, names, universe), dumpKeys(t, m, names, universe)
		if !got.equal(want) {
			t.Fatalf("step %d (%s): pebble differs from memory\n got %v\nwant %v", step, what, got, want)
		}
	}
	for step := range steps {
		switch op := r.IntN(1000); {
		case op < 450:
			n, k, v := pick("v"), key(), val()
			both(func(b Backend) { mustValue(t, b, n).Put(k, v) })
		case op < 600:
			n, k := pick("v"), key()
			both(func(b Backend) { mustValue(t, b, n).Delete(k) })
		case op < 700:
			n, k := pick("v"), key()
			both(func(b Backend) { mustValue(t, b, n).Get(k) })
		case op < 705:
			n, k, v := pick("l"), key(), val()
			both(func(b Backend) { mustList(t, b, n).Append(k, v) })
		case op < 710:
			n, k, uk, v := pick("m"), key(), key(), val()
			both(func(b Backend) { mustMap(t, b, n).Put(k, uk, v) })
		case op < 800:
			if len(out) < 4 {
				id++
				sm, err := cur.mem.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				openGates()
				gate := make(chan struct{})
				gates = append(gates, gate)
				cur.peb.(*Pebble).cutHook = func() { <-gate }
				sp, err := cur.peb.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, snap{sm, sp, id})
			}
		case op < 900:
			if len(out) > 0 {
				i := r.IntN(len(out))
				s := out[i]
				out = slices.Delete(out, i, i+1)
				openGates()
				fail := r.IntN(5) == 0
				abandon := r.IntN(5) == 0
				if abandon {
					s.mem.Release()
					s.peb.Release()
					break
				}
				dir := fmt.Sprintf("chk-%d/", s.id)
				hm, err := s.mem.Upload(ctx, st, dir+"mem/", "shared/mem/")
				if err != nil {
					t.Fatal(err)
				}
				st.fail.Store(fail)
				hp, err := s.peb.Upload(ctx, st, dir+"peb/", "shared/peb/")
				st.fail.Store(false)
				s.mem.Release()
				s.peb.Release()
				if fail {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				uploaded = append(uploaded, done{hm, hp, s.id})
				if len(deltas(hp)) > 0 {
					nDelta++
				} else {
					nBase++
				}
				// Restore it fresh now and compare with the memory one.
				if r.IntN(3) == 0 {
					pm := OpenMemory(MemoryOptions{})
					pp := openTestPebble(t, opts)
					declare(pm)
					declare(pp)
					if err := pm.Restore(ctx, st, hm); err != nil {
						t.Fatal(err)
					}
					if err := pp.Restore(ctx, st, hp); err != nil {
						t.Fatal(err)
					}
					check(step, fmt.Sprintf("fresh restore of %d (%d deltas)", s.id, len(deltas(hp))), pp, pm)
					restoredDeltas += len(deltas(hp))
					pp.Close()
				}
			}
		case op < 910:
			if len(uploaded) > 0 {
				openGates()
				d := uploaded[r.IntN(len(uploaded))]
				if r.IntN(2) == 0 {
					cur.restore(t, st, d.mem, d.peb)
				} else {
					next := open()
					declare(next.mem)
					declare(next.peb)
					next.restore(t, st, d.mem, d.peb)
					cur.peb.Close()
					cur = next
				}
				check(step, "restored", cur.peb, cur.mem)
			}
		default:
			check(step, "live", cur.peb, cur.mem)
		}
	}
	check(steps, "end", cur.peb, cur.mem)
	t.Logf("uploaded %d deltas and %d bases; fresh restores applied %d deltas", nDelta, nBase, restoredDeltas)
	if opts.valueCache == 0 && restoredDeltas == 0 {
		t.Error("no restore applied a delta: the run tested base snapshots only")
	}
	openGates()
	for _, s := range out {
		s.mem.Release()
		s.peb.Release()
	}
}
