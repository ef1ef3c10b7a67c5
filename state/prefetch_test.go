package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// TestPrefetchChangesNothing runs one random sequence of operations on two
// memory backends, one of them prefetching groups of keys (the keys of the
// operations that follow, and others) between operations, and checks every
// read of both against a plain-map model, and snapshots taken meanwhile
// against the model at the time they were taken. STATE_SEED=n replays a run.
func TestPrefetchChangesNothing(t *testing.T) {
	seed := testSeed(t)
	for run := range 4 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			prefetchRun(t, rand.New(rand.NewPCG(seed, uint64(run))), 10_000)
		})
	}
}

func prefetchRun(t *testing.T, r *rand.Rand, steps int) {
	st := newFakeStorage()
	pre, plain := OpenMemory(MemoryOptions{}), OpenMemory(MemoryOptions{})
	declare := func(b *Memory) {
		mustValue(t, b, "v")
		mustList(t, b, "l")
		mustMap(t, b, "m")
	}
	declare(pre)
	declare(plain)
	type tables struct {
		v ValueTable
		l ListTable
		m MapTable
	}
	both := []tables{
		{mustValue(t, pre, "v"), mustList(t, pre, "l"), mustMap(t, pre, "m")},
		{mustValue(t, plain, "v"), mustList(t, plain, "l"), mustMap(t, plain, "m")},
	}
	ref := newModel()
	ref.values["v"] = map[string]string{}
	ref.lists["l"] = map[string][]string{}
	ref.maps["m"] = map[string]map[string]string{}

	keySpace := 50
	key := func() []byte { return []byte(strconv.Itoa(r.IntN(keySpace))) }
	val := func() []byte { return []byte(strings.Repeat(strconv.Itoa(r.IntN(100)), r.IntN(12))) }
	// upcoming are the keys of the next operations, drawn ahead so that a
	// prefetch can name them, as the runtime does with a batch.
	var upcoming [][]byte
	next := func() []byte {
		if len(upcoming) == 0 {
			return key()
		}
		k := upcoming[0]
		upcoming = upcoming[1:]
		return k
	}
	var flat []byte
	var ends []int
	var snaps []pending
	var id checkpoint.ID
	for step := range steps {
		switch op := r.IntN(100); {
		case op < 10:
			// Prefetch the next keys, and some that will not come, in
			// whichever tables were used since the last prefetch.
			flat, ends = flat[:0], ends[:0]
			upcoming = upcoming[:0]
			for range r.IntN(70) {
				k := key()
				if r.IntN(4) > 0 {
					upcoming = append(upcoming, k)
				}
				flat = append(flat, k...)
				ends = append(ends, len(flat))
			}
			pre.Prefetch(flat, ends)
		case op < 30:
			kk, v := next(), val()
			for _, tb := range both {
				if err := tb.v.Put(kk, v); err != nil {
					t.Fatal(err)
				}
			}
			ref.values["v"][string(kk)] = string(v)
		case op < 36:
			kk := next()
			for _, tb := range both {
				if err := tb.v.Delete(kk); err != nil {
					t.Fatal(err)
				}
			}
			delete(ref.values["v"], string(kk))
		case op < 56:
			kk := next()
			want, wok := ref.values["v"][string(kk)]
			for i, tb := range both {
				got, ok, err := tb.v.Get(kk)
				if err != nil || ok != wok || string(got) != want {
					t.Fatalf("step %d: backend %d: Get(%s) = %q %v %v, want %q %v", step, i, kk, got, ok, err, want, wok)
				}
			}
		case op < 66:
			kk, v := next(), val()
			for _, tb := range both {
				if err := tb.l.Append(kk, v); err != nil {
					t.Fatal(err)
				}
			}
			ref.lists["l"][string(kk)] = append(ref.lists["l"][string(kk)], string(v))
		case op < 68:
			kk := next()
			for _, tb := range both {
				if err := tb.l.Delete(kk); err != nil {
					t.Fatal(err)
				}
			}
			delete(ref.lists["l"], string(kk))
		case op < 78:
			kk, uk, v := next(), key(), val()
			for _, tb := range both {
				if err := tb.m.Put(kk, uk, v); err != nil {
					t.Fatal(err)
				}
			}
			if ref.maps["m"][string(kk)] == nil {
				ref.maps["m"][string(kk)] = map[string]string{}
			}
			ref.maps["m"][string(kk)][string(uk)] = string(v)
		case op < 82:
			kk, uk := next(), key()
			for _, tb := range both {
				if err := tb.m.Delete(kk, uk); err != nil {
					t.Fatal(err)
				}
			}
			if m := ref.maps["m"][string(kk)]; m != nil {
				delete(m, string(uk))
				if len(m) == 0 {
					delete(ref.maps["m"], string(kk))
				}
			}
		case op < 88:
			if len(snaps) < 3 {
				id++
				s, err := pre.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				snaps = append(snaps, pending{s, ref.clone()})
			}
		case op < 92:
			if len(snaps) > 0 {
				p := snaps[0]
				snaps = snaps[1:]
				got := dump(t, restored(t, st, p.s, fmt.Sprintf("chk-%d/", step), declare))
				if !got.equal(p.want) {
					t.Fatalf("step %d: snapshot %v differs\n got %v\nwant %v", step, p.s, got, p.want)
				}
			}
		case op < 99:
			// Let the tables grow and shrink their key sets.
			keySpace = []int{10, 50, 500, 2000}[r.IntN(4)]
		default:
			for i, b := range []*Memory{pre, plain} {
				if got := dump(t, b); !got.equal(ref) {
					t.Fatalf("step %d: backend %d differs from model\n got %v\nwant %v", step, i, got, ref)
				}
			}
		}
	}
	for _, p := range snaps {
		if got := dump(t, restored(t, st, p.s, "final/", declare)); !got.equal(p.want) {
			t.Fatal("final snapshot differs")
		}
	}
	for i, b := range []*Memory{pre, plain} {
		if got := dump(t, b); !got.equal(ref) {
			t.Fatalf("backend %d: final state differs from model", i)
		}
	}
}

// TestPrefetchEdgeCases: no keys, an empty key, unused and closed backends.
func TestPrefetchEdgeCases(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	b.Prefetch(nil, nil) // nothing declared
	v := mustValue(t, b, "v")
	if err := v.Put(nil, []byte("empty key")); err != nil {
		t.Fatal(err)
	}
	if !b.tables["v"].index().used {
		t.Fatal("a Put did not mark its table used")
	}
	b.Prefetch([]byte("ab"), []int{0, 2, 2}) // "", "ab", ""
	if b.tables["v"].index().used {
		t.Fatal("Prefetch skipped a table used since the last call")
	}
	got, ok, err := v.Get(nil)
	if err != nil || !ok || string(got) != "empty key" {
		t.Fatalf("Get(empty key) = %q %v %v", got, ok, err)
	}
	if err := b.Restore(context.Background(), newFakeStorage(), checkpoint.StateHandle{Backend: "memory"}); err != nil {
		t.Fatal(err)
	}
	b.Prefetch([]byte("ab"), []int{2})
	if _, ok, _ := v.Get(nil); ok {
		t.Fatal("restore of an empty snapshot kept a value")
	}
	b.Close()
	b.Prefetch([]byte("ab"), []int{2})
}
