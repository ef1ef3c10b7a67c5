package state

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// testSeed is a random test's seed: STATE_SEED if set, else the clock. It
// logs it, and logs it again if the test fails.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STATE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay with STATE_SEED=%d)", seed, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d", seed)
		}
	})
	return seed
}

// TestRandomAgainstModel runs random operations, snapshots, uploads and
// restores against the memory backend and a plain-map model, and compares
// them after every step that can diverge. STATE_SEED=n replays a run.
func TestRandomAgainstModel(t *testing.T) {
	seed := testSeed(t)
	for run := range 4 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			randomRun(t, rand.New(rand.NewPCG(seed, uint64(run))), 20_000)
		})
	}
}

type pending struct {
	s    Snapshot
	want *model
}

func randomRun(t *testing.T, r *rand.Rand, steps int) {
	ctx := context.Background()
	st := newFakeStorage()
	b := OpenMemory(MemoryOptions{})
	ref := newModel()
	names := []string{"a", "b"}
	values := map[string]ValueTable{}
	lists := map[string]ListTable{}
	mtabs := map[string]MapTable{}
	declare := func(b *Memory) {
		for _, n := range names {
			values["v"+n] = mustValue(t, b, "v"+n)
			lists["l"+n] = mustList(t, b, "l"+n)
			mtabs["m"+n] = mustMap(t, b, "m"+n)
		}
	}
	declare(b)
	for _, n := range names {
		ref.values["v"+n] = map[string]string{}
		ref.lists["l"+n] = map[string][]string{}
		ref.maps["m"+n] = map[string]map[string]string{}
	}
	keySpace := 30
	var out []pending
	type done struct {
		h    checkpoint.StateHandle
		want *model
	}
	var uploaded []done
	val := func() []byte {
		// Mix inline and out-of-line lengths, and the empty value.
		return []byte(strings.Repeat(strconv.Itoa(r.IntN(100)), r.IntN(12)))
	}
	key := func() []byte { return []byte(strconv.Itoa(r.IntN(keySpace))) }
	pick := func() string { return names[r.IntN(len(names))] }
	var id checkpoint.ID
	for step := range steps {
		switch op := r.IntN(100); {
		case op < 25:
			n, kk, v := "v"+pick(), key(), val()
			values[n].Put(kk, v)
			ref.values[n][string(kk)] = string(v)
		case op < 32:
			n, kk := "v"+pick(), key()
			values[n].Delete(kk)
			delete(ref.values[n], string(kk))
		case op < 42:
			n, kk := "v"+pick(), key()
			got, ok, _ := values[n].Get(kk)
			want, wok := ref.values[n][string(kk)]
			if ok != wok || string(got) != want {
				t.Fatalf("step %d: %s Get(%s) = %q %v, want %q %v", step, n, kk, got, ok, want, wok)
			}
		case op < 55:
			n, kk, v := "l"+pick(), key(), val()
			lists[n].Append(kk, v)
			ref.lists[n][string(kk)] = append(ref.lists[n][string(kk)], string(v))
		case op < 58:
			n, kk := "l"+pick(), key()
			lists[n].Delete(kk)
			delete(ref.lists[n], string(kk))
		case op < 72:
			n, kk, uk, v := "m"+pick(), key(), key(), val()
			mtabs[n].Put(kk, uk, v)
			if ref.maps[n][string(kk)] == nil {
				ref.maps[n][string(kk)] = map[string]string{}
			}
			ref.maps[n][string(kk)][string(uk)] = string(v)
		case op < 78:
			n, kk, uk := "m"+pick(), key(), key()
			mtabs[n].Delete(kk, uk)
			if m := ref.maps[n][string(kk)]; m != nil {
				delete(m, string(uk))
				if len(m) == 0 {
					delete(ref.maps[n], string(kk))
				}
			}
		case op < 80:
			n, kk := "m"+pick(), key()
			mtabs[n].Clear(kk)
			delete(ref.maps[n], string(kk))
		case op < 83:
			n, kk := "m"+pick(), key()
			var got []string
			mtabs[n].Iterate(kk, func(uk, v []byte) error { got = append(got, string(uk)+"="+string(v)); return nil })
			var want []string
			for _, uk := range slices.Sorted(maps.Keys(ref.maps[n][string(kk)])) {
				want = append(want, uk+"="+ref.maps[n][string(kk)][uk])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: %s Iterate(%s) = %v, want %v", step, n, kk, got, want)
			}
		case op < 87:
			if len(out) < 3 {
				id++
				s, err := b.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, pending{s, ref.clone()})
			}
		case op < 92:
			if len(out) > 0 {
				i := r.IntN(len(out))
				p := out[i]
				out = slices.Delete(out, i, i+1)
				if r.IntN(4) == 0 {
					p.s.Release() // abandoned checkpoint
					break
				}
				h, err := p.s.Upload(ctx, st, fmt.Sprintf("chk-%d/", step), "shared/")
				p.s.Release()
				if err != nil {
					t.Fatal(err)
				}
				uploaded = append(uploaded, done{h, p.want})
			}
		case op < 93:
			if len(uploaded) > 0 {
				d := uploaded[r.IntN(len(uploaded))]
				if r.IntN(2) == 0 {
					// Restore in place, as after a failure.
					if err := b.Restore(ctx, st, d.h); err != nil {
						t.Fatal(err)
					}
				} else {
					for _, p := range out {
						p.s.Release()
					}
					out = nil
					b = OpenMemory(MemoryOptions{})
					declare(b)
					if err := b.Restore(ctx, st, d.h); err != nil {
						t.Fatal(err)
					}
				}
				ref = d.want.clone()
				if got := dump(t, b); !got.equal(ref) {
					t.Fatalf("step %d: restored state differs\n got %v\nwant %v", step, got, ref)
				}
			}
		case op < 95:
			// Let the tables grow (rehash) now and then.
			keySpace = []int{10, 30, 300, 2000}[r.IntN(4)]
		default:
			if got := dump(t, b); !got.equal(ref) {
				t.Fatalf("step %d: state differs from model\n got %v\nwant %v", step, got, ref)
			}
		}
	}
	for _, p := range out {
		h, err := p.s.Upload(ctx, st, "final/", "shared/")
		p.s.Release()
		if err != nil {
			t.Fatal(err)
		}
		nb := OpenMemory(MemoryOptions{})
		if err := nb.Restore(ctx, st, h); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, nb); !got.equal(p.want) {
			t.Fatal("final snapshot differs")
		}
	}
	if got := dump(t, b); !got.equal(ref) {
		t.Fatal("final state differs from model")
	}
}
