package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

func mustValue(t testing.TB, b Backend, name string) ValueTable {
	t.Helper()
	v, err := b.Value(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustList(t testing.TB, b Backend, name string) ListTable {
	t.Helper()
	v, err := b.List(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustMap(t testing.TB, b Backend, name string) MapTable {
	t.Helper()
	v, err := b.Map(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func k(i int) []byte { return fmt.Appendf(nil, "key-%d", i) }

// TestSnapshotIsolation writes, snapshots, writes more (overwrites, deletes,
// appends, enough inserts to rehash every table), and checks that the restored
// snapshot equals the state at Snapshot time exactly.
func TestSnapshotIsolation(t *testing.T) {
	long := strings.Repeat("x", 40) // out of line (> inlineCap)
	tests := []struct {
		name   string
		before func(v ValueTable, l ListTable, m MapTable)
		after  func(v ValueTable, l ListTable, m MapTable)
	}{
		{
			name: "overwrite inline and out of line",
			before: func(v ValueTable, l ListTable, m MapTable) {
				v.Put(k(1), []byte("a"))
				v.Put(k(2), []byte(long))
			},
			after: func(v ValueTable, l ListTable, m MapTable) {
				v.Put(k(1), []byte("b"))
				v.Put(k(2), []byte(strings.ToUpper(long)))
				v.Put(k(2), []byte("short now"))
			},
		},
		{
			name: "deletes",
			before: func(v ValueTable, l ListTable, m MapTable) {
				for i := range 100 {
					v.Put(k(i), k(i))
					l.Append(k(i), k(i))
					m.Put(k(i%7), k(i), k(i))
				}
			},
			after: func(v ValueTable, l ListTable, m MapTable) {
				for i := 0; i < 100; i += 2 {
					v.Delete(k(i))
					l.Delete(k(i))
					m.Delete(k(i%7), k(i))
				}
				m.Clear(k(3))
			},
		},
		{
			name: "appends share the list buffer",
			before: func(v ValueTable, l ListTable, m MapTable) {
				for range 10 {
					l.Append(k(1), []byte(long))
					l.Append(k(2), []byte("s"))
				}
			},
			after: func(v ValueTable, l ListTable, m MapTable) {
				for i := range 10 {
					l.Append(k(1), k(i))
					l.Append(k(2), []byte(long))
				}
			},
		},
		{
			name: "nested map writes",
			before: func(v ValueTable, l ListTable, m MapTable) {
				m.Put(k(1), []byte("a"), []byte("1"))
				m.Put(k(1), []byte("b"), []byte("2"))
			},
			after: func(v ValueTable, l ListTable, m MapTable) {
				m.Put(k(1), []byte("a"), []byte("changed"))
				m.Put(k(1), []byte("c"), []byte("3"))
				m.Delete(k(1), []byte("b"))
				m.Put(k(2), []byte("a"), []byte("new key"))
			},
		},
		{
			name: "growth and rehash during the snapshot",
			before: func(v ValueTable, l ListTable, m MapTable) {
				for i := range 50 {
					v.Put(k(i), k(i))
					l.Append(k(i), k(i))
					m.Put(k(i), k(i), k(i))
				}
			},
			after: func(v ValueTable, l ListTable, m MapTable) {
				for i := range 5000 {
					v.Put(k(i), []byte("after"))
					l.Append(k(i), []byte("after"))
					m.Put(k(i), k(i+1), []byte("after"))
				}
				for i := 0; i < 5000; i += 3 {
					v.Delete(k(i))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := OpenMemory(MemoryOptions{})
			v, l, m := mustValue(t, b, "v"), mustList(t, b, "l"), mustMap(t, b, "m")
			tt.before(v, l, m)
			want := dump(t, b)
			s, err := b.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			tt.after(v, l, m)
			live := dump(t, b)
			got := dump(t, restored(t, newFakeStorage(), s, "job/chk-1/op/", nil))
			if !got.equal(want) {
				t.Fatalf("restored snapshot differs from state at Snapshot\n got %v\nwant %v", got, want)
			}
			if after := dump(t, b); !after.equal(live) {
				t.Fatal("upload changed the live state")
			}
		})
	}
}

// TestTwoOutstandingSnapshots keeps two snapshots in flight while writing,
// uploads the newer one first, releases out of order, and checks both.
func TestTwoOutstandingSnapshots(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	v, l, m := mustValue(t, b, "v"), mustList(t, b, "l"), mustMap(t, b, "m")
	write := func(round int) {
		for i := range 300 {
			val := fmt.Appendf(nil, "r%d-%d", round, i)
			if i%5 == round {
				v.Delete(k(i))
			} else {
				v.Put(k(i), val)
			}
			l.Append(k(i%10), val)
			m.Put(k(i%10), k(i), val)
		}
	}
	write(0)
	want1 := dump(t, b)
	s1, _ := b.Snapshot(1)
	write(1)
	want2 := dump(t, b)
	s2, _ := b.Snapshot(2)
	write(2)
	st := newFakeStorage()
	if got := dump(t, restored(t, st, s2, "chk-2/", nil)); !got.equal(want2) {
		t.Fatal("snapshot 2 differs")
	}
	write(3) // s2 released: writes to what only s2 shared go in place
	if got := dump(t, restored(t, st, s1, "chk-1/", nil)); !got.equal(want1) {
		t.Fatal("snapshot 1 differs")
	}
	if b.clk.maxLive.Load() != 0 {
		t.Fatalf("maxLive = %d after releasing all snapshots", b.clk.maxLive.Load())
	}
}

// TestUploadConcurrentWithWrites runs uploads on other goroutines while the
// owner keeps writing: with -race this checks the copy-on-write discipline.
func TestUploadConcurrentWithWrites(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	v, l, m := mustValue(t, b, "v"), mustList(t, b, "l"), mustMap(t, b, "m")
	st := newFakeStorage()
	type result struct {
		want *model
		h    checkpoint.StateHandle
		err  error
	}
	var wg sync.WaitGroup
	results := make([]*result, 5)
	for round := range results {
		for i := range 2000 {
			val := fmt.Appendf(nil, "%d-%d", round, i)
			v.Put(k(i), val)
			if i%3 == 0 {
				v.Delete(k(i + round))
			}
			l.Append(k(i%50), val)
			m.Put(k(i%50), k(i%17), val)
		}
		r := &result{want: dump(t, b)}
		results[round] = r
		s, err := b.Snapshot(checkpoint.ID(round + 1))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer s.Release()
			r.h, r.err = s.Upload(context.Background(), st, fmt.Sprintf("chk-%d/", round), "shared/")
		})
	}
	wg.Wait()
	for round, r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		nb := OpenMemory(MemoryOptions{})
		if err := nb.Restore(context.Background(), st, r.h); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, nb); !got.equal(r.want) {
			t.Fatalf("round %d: restored differs", round)
		}
	}
}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Memory, *fakeStorage, checkpoint.StateHandle) {
		b := OpenMemory(MemoryOptions{})
		mustValue(t, b, "counts").Put([]byte("a"), []byte("1"))
		mustList(t, b, "events").Append([]byte("a"), []byte("e1"))
		mustMap(t, b, "seen").Put([]byte("a"), []byte("u"), []byte("v"))
		s, _ := b.Snapshot(7)
		defer s.Release()
		st := newFakeStorage()
		h, err := s.Upload(ctx, st, "job/tasks/0/chk-7/count/", "job/shared/0/")
		if err != nil {
			t.Fatal(err)
		}
		return b, st, h
	}
	t.Run("handle", func(t *testing.T) {
		_, _, h := setup(t)
		if h.Backend != "memory" || len(h.Files) != 3 || h.Size == 0 || h.Incremental != h.Size {
			t.Fatalf("handle %+v", h)
		}
		var sum int64
		for i, f := range h.Files {
			want := []string{"counts", "events", "seen"}[i]
			if f.Local != want || f.Name != "job/tasks/0/chk-7/count/"+want || len(f.CRC32C) != 8 || f.Shared {
				t.Errorf("file %d: %+v", i, f)
			}
			sum += f.Size
		}
		if sum != h.Size {
			t.Errorf("size %d, files sum to %d", h.Size, sum)
		}
	})
	corrupt := []struct {
		name   string
		mangle func(st *fakeStorage, h *checkpoint.StateHandle)
		want   string
	}{
		{"flipped byte", func(st *fakeStorage, h *checkpoint.StateHandle) {
			st.objs[h.Files[1].Name][12] ^= 1
		}, `read job/tasks/0/chk-7/count/events: checkpoint: corrupt`},
		{"truncated", func(st *fakeStorage, h *checkpoint.StateHandle) {
			n := h.Files[2].Name
			st.objs[n] = st.objs[n][:len(st.objs[n])-1]
		}, `read job/tasks/0/chk-7/count/seen: checkpoint: corrupt`},
		{"missing", func(st *fakeStorage, h *checkpoint.StateHandle) {
			delete(st.objs, h.Files[0].Name)
		}, `read job/tasks/0/chk-7/count/counts: checkpoint: object not found`},
		{"bad content with a matching checksum", func(st *fakeStorage, h *checkpoint.StateHandle) {
			st.objs["x"] = []byte("WEIRMEM\x01\x01\x06counts\x05")
			ref, _ := checkpoint.PutFile(ctx, st, "x", bytes.NewReader(st.objs["x"]))
			ref.Local = "counts"
			h.Files[0] = ref
		}, `restore "x": key count 5 exceeds the file`},
		{"wrong backend", func(st *fakeStorage, h *checkpoint.StateHandle) {
			h.Backend = "pebble"
		}, `restore a "pebble" snapshot`},
	}
	for _, tt := range corrupt {
		t.Run(tt.name, func(t *testing.T) {
			b, st, h := setup(t)
			before := dump(t, b)
			tt.mangle(st, &h)
			err := b.Restore(ctx, st, h)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore error = %v, want it to contain %s", err, tt.want)
			}
			if strings.Contains(tt.want, "corrupt") && !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Errorf("error %v does not wrap checkpoint.ErrCorrupt", err)
			}
			if !dump(t, b).equal(before) {
				t.Fatal("a failed restore changed the state")
			}
		})
	}
	t.Run("replaces all state and keeps handles", func(t *testing.T) {
		b, st, h := setup(t)
		scope := &KeyScope{}
		cnt, err := NewValue(b, scope, "counts", String())
		if err != nil {
			t.Fatal(err)
		}
		scope.Set([]byte("b"))
		cnt.Set("later")
		extra := mustValue(t, b, "extra")
		extra.Put([]byte("z"), []byte("z"))
		if err := b.Restore(ctx, st, h); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := cnt.Get(); ok {
			t.Error("write after the snapshot survived the restore")
		}
		scope.Set([]byte("a"))
		if got, ok, err := cnt.Get(); got != "1" || !ok || err != nil {
			t.Errorf("Get after restore = %q, %v, %v", got, ok, err)
		}
		if _, ok, _ := extra.Get([]byte("z")); ok {
			t.Error("a table without a file was not emptied")
		}
	})
	t.Run("kind mismatch", func(t *testing.T) {
		_, st, h := setup(t)
		b := OpenMemory(MemoryOptions{})
		mustList(t, b, "counts")
		err := b.Restore(ctx, st, h)
		if err == nil || !strings.Contains(err.Error(), `"counts" is list state here, value in the snapshot`) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestUploadSizeLimitNamesObject uploads into the in-memory checkpoint
// storage, whose per-object limit must name the state that outgrew it.
func TestUploadSizeLimitNamesObject(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	v := mustValue(t, b, "big-state")
	for i := range 1000 {
		v.Put(k(i), make([]byte, 100))
	}
	mustValue(t, b, "small").Put(k(1), k(1))
	s, _ := b.Snapshot(3)
	defer s.Release()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{MaxObjectSize: 5 << 10})
	_, err := s.Upload(context.Background(), st, "job/tasks/0/chk-3/counter/", "")
	var tooLarge *checkpoint.ObjectTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Name != "job/tasks/0/chk-3/counter/big-state" {
		t.Fatalf("err = %v, want an ObjectTooLargeError naming the state's object", err)
	}
	if !strings.Contains(err.Error(), `"job/tasks/0/chk-3/counter/big-state"`) {
		t.Errorf("message does not name the object: %v", err)
	}
}

// TestCheckpointMemoryStorage round-trips through the real in-memory storage.
func TestCheckpointMemoryStorage(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	mustValue(t, b, "v").Put(k(1), k(2))
	mustList(t, b, "l").Append(k(1), k(2))
	mustMap(t, b, "m").Put(k(1), k(2), k(3))
	want := dump(t, b)
	s, _ := b.Snapshot(1)
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	if got := dump(t, restored(t, st, s, "job/tasks/0/chk-1/op/", nil)); !got.equal(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestUploadAfterRelease(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	s, _ := b.Snapshot(1)
	s.Release()
	s.Release() // idempotent
	if _, err := s.Upload(context.Background(), newFakeStorage(), "d/", ""); err == nil {
		t.Fatal("upload after release succeeded")
	}
}

func TestDeclare(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	v1 := mustValue(t, b, "x")
	if v2 := mustValue(t, b, "x"); v1 != v2 {
		t.Error("declaring twice gave two tables")
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"list over value", func() error { _, err := b.List("x"); return err }(), `"x" is declared as value state, not list`},
		{"empty name", func() error { _, err := b.Map(""); return err }(), "invalid state name"},
		{"slash", func() error { _, err := b.Value("a/b"); return err }(), "invalid state name"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, tt.err, tt.want)
		}
	}
	b.Close()
	if _, err := b.Value("y"); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
	if _, err := NewMemory(MemoryOptions{})(0, "op", t.TempDir()); err != nil {
		t.Error(err)
	}
}

// TestValueMapExtReuse checks that an out-of-line buffer index freed and
// reused after a snapshot, a buffer moving back inline, and appends to a
// shared buffer leave the snapshot's view as it was.
func TestValueMapExtReuse(t *testing.T) {
	clk := newClock()
	m := newValueMap(clk, 0)
	long := func(c byte, n int) []byte { return []byte(strings.Repeat(string(c), n)) }
	m.put([]byte("a"), long('a', 40))
	m.put([]byte("b"), long('b', 40))
	m.appendValue([]byte("c"), long('c', 30))
	want := map[string]string{"a": string(long('a', 40)), "b": string(long('b', 40)), "c": string(long('c', 30))}
	ver, _ := clk.take()
	v := m.view()
	m.delete([]byte("a"))                    // frees a's index
	m.put([]byte("d"), long('d', 50))        // reuses it
	m.put([]byte("b"), []byte("short"))      // back inline, frees b's index
	m.put([]byte("e"), long('e', 60))        // reuses it
	m.appendValue([]byte("c"), long('C', 3)) // in place past the shared length
	m.put([]byte("d"), long('D', 50))        // d's buffer is private: in place
	got := map[string]string{}
	v.each(func(k, val []byte) error { got[string(k)] = string(val); return nil })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("snapshot view changed:\n got %v\nwant %v", got, want)
	}
	clk.release(ver)
	for k, w := range map[string]string{"b": "short", "c": string(long('c', 30)) + "CCC", "d": string(long('D', 50)), "e": string(long('e', 60))} {
		if g, ok := m.get([]byte(k)); !ok || string(g) != w {
			t.Fatalf("live %q = %q, want %q", k, g, w)
		}
	}
	if _, ok := m.get([]byte("a")); ok {
		t.Fatal("deleted key a still present")
	}
}
