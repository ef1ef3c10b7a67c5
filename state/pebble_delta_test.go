package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/diskfault"
)

// failingPuts is a fakeStorage whose Puts fail while fail is set.
type failingPuts struct {
	*fakeStorage
	fail atomic.Bool
}

var errPutFails = errors.New("put fails (test)")

func (s *failingPuts) Put(ctx context.Context, name string, r io.Reader) error {
	if s.fail.Load() {
		return errPutFails
	}
	return s.fakeStorage.Put(ctx, name, r)
}

func deltas(h checkpoint.StateHandle) []string {
	var out []string
	for _, f := range h.Files {
		if isDelta(f.Local) {
			out = append(out, f.Local)
		}
	}
	return out
}

// newObjects returns the objects in st not in before.
func newObjects(st *fakeStorage, before []string) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for name := range st.objs {
		if !slices.Contains(before, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func objects(st *fakeStorage) []string { return newObjects(st, nil) }

// TestPebbleDeltaSnapshots: while only the value caches take writes, a
// snapshot writes and uploads one small delta file of the changes, Pebble
// untouched; its handle is the base's files plus the chain's deltas, and
// restores to exactly its state. A write to the DB itself, a failed delta
// or a long chain makes the next snapshot a base again.
func TestPebbleDeltaSnapshots(t *testing.T) {
	for _, cut := range pebbleCuts {
		t.Run(cut.String(), func(t *testing.T) { testPebbleDeltaSnapshots(t, withCut(smallPebble, cut)) })
	}
}

func testPebbleDeltaSnapshots(t *testing.T, opts PebbleOptions) {
	st := newFakeStorage()
	p := openTestPebble(t, opts)
	v := mustValue(t, p, "v")
	const n = 1000
	fillValues(t, v, 0, n, 50, "one")
	h1 := checkpointNow(t, p, st, 1)
	if d := deltas(h1); len(d) > 0 {
		t.Fatalf("first checkpoint has deltas %v", d)
	}

	// Updates, new keys and deletes go into one delta.
	fillValues(t, v, 0, 100, 50, "two")
	fillValues(t, v, n, n+10, 50, "two")
	for i := 200; i < 205; i++ {
		if err := v.Delete(k(i)); err != nil {
			t.Fatal(err)
		}
	}
	want2 := readAll(t, p, 2*n)
	before := objects(st)
	flushes := p.db.Metrics().Flush.Count
	h2 := checkpointNow(t, p, st, 2)
	if got := p.db.Metrics().Flush.Count; got != flushes {
		t.Errorf("a delta snapshot flushed the memtable (%d flushes, were %d)", got, flushes)
	}
	d2 := deltas(h2)
	if len(d2) != 1 {
		t.Fatalf("checkpoint 2: deltas %v, want one", d2)
	}
	wantNew := []string{"shared/op/" + p.Instance() + "/" + d2[0]}
	if got := newObjects(st, before); !slices.Equal(got, wantNew) {
		t.Errorf("checkpoint 2 wrote %q, want only its delta %q", got, wantNew)
	}
	if !slices.Equal(h2.Files[:len(h1.Files)], h1.Files) {
		t.Errorf("checkpoint 2 does not reference the base's files as checkpoint 1 uploaded them")
	}
	if last := h2.Files[len(h2.Files)-1]; !last.Shared || h2.Incremental != last.Size || last.Size > 10_000 {
		t.Errorf("checkpoint 2: delta %+v, incremental %d", last, h2.Incremental)
	}

	// No change: the same handle, nothing uploaded.
	before = objects(st)
	h3 := checkpointNow(t, p, st, 3)
	if !slices.Equal(h3.Files, h2.Files) || h3.Incremental != 0 {
		t.Errorf("checkpoint 3 without changes: %d files (was %d), incremental %d", len(h3.Files), len(h2.Files), h3.Incremental)
	}
	if got := newObjects(st, before); len(got) > 0 {
		t.Errorf("checkpoint 3 without changes wrote %q", got)
	}

	// A second delta; a key deleted in the first comes back.
	fillValues(t, v, 50, 150, 50, "four")
	fillValues(t, v, 201, 202, 50, "four")
	want4 := readAll(t, p, 2*n)
	h4 := checkpointNow(t, p, st, 4)
	if d := deltas(h4); len(d) != 2 || d[0] != d2[0] {
		t.Fatalf("checkpoint 4: deltas %v, want %s and one more", d, d2[0])
	}

	// Each restores to its own state, on a fresh directory.
	for _, c := range []struct {
		id   int
		h    checkpoint.StateHandle
		want map[string]string
	}{{2, h2, want2}, {4, h4, want4}} {
		q := restoreFresh(t, st, c.h, opts)
		if got := readAll(t, q, 2*n); !maps.Equal(got, c.want) {
			t.Errorf("checkpoint %d restored %d keys, want %d", c.id, len(got), len(c.want))
		}
	}

	// A write to the DB itself (a map's) makes the next snapshot a base.
	m, err := p.Map("m")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Put([]byte("a"), []byte("b"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	fillValues(t, v, 300, 310, 50, "five")
	want5 := readAll(t, p, 2*n)
	h5 := checkpointNow(t, p, st, 5)
	if d := deltas(h5); len(d) > 0 {
		t.Errorf("checkpoint 5 after a map write has deltas %v", d)
	}
	q := restoreFresh(t, st, h5, opts)
	if got := readAll(t, q, 2*n); !maps.Equal(got, want5) {
		t.Errorf("checkpoint 5 restored %d keys, want %d", len(got), len(want5))
	}
	// A restored store starts with a base, then builds deltas on it.
	qv := mustValue(t, q, "v")
	fillValues(t, qv, 0, 10, 50, "six")
	if d := deltas(checkpointNow(t, q, st, 6)); len(d) > 0 {
		t.Errorf("the first checkpoint after a restore has deltas %v", d)
	}
	fillValues(t, qv, 10, 20, 50, "seven")
	wantQ := readAll(t, q, 2*n)
	h7 := checkpointNow(t, q, st, 7)
	if d := deltas(h7); len(d) != 1 || !strings.Contains(d[0], q.Instance()) {
		t.Errorf("checkpoint 7 of the restored store: deltas %v, want one of instance %s", d, q.Instance())
	}
	if got := readAll(t, restoreFresh(t, st, h7, opts), 2*n); !maps.Equal(got, wantQ) {
		t.Errorf("checkpoint 7 restored %d keys, want %d", len(got), len(wantQ))
	}
}

// TestPebbleDeltaAfterFailedUploads: an upload that fails, of a base or of
// a delta, is repeated by the next snapshot of the chain, so that it holds
// every change; the local files stay until the chain is let go of. A base
// released without an upload is uploaded by its first delta.
func TestPebbleDeltaAfterFailedUploads(t *testing.T) {
	st := &failingPuts{fakeStorage: newFakeStorage()}
	p := openTestPebble(t, smallPebble)
	v := mustValue(t, p, "v")
	fillValues(t, v, 0, 500, 50, "one")

	// Base 1 is released without an upload (its checkpoint was given up).
	s1, err := p.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	s1.Release()
	base := s1.(*PebbleSnapshot)
	if _, err := os.Stat(base.dir); err != nil {
		t.Fatalf("the chain's base is gone while the backend builds on it: %v", err)
	}

	// Delta 2's upload fails.
	fillValues(t, v, 0, 50, 50, "two")
	st.fail.Store(true)
	if _, err := tryCheckpoint(p, st, 2); !errors.Is(err, errPutFails) {
		t.Fatalf("checkpoint 2 while puts fail: %v", err)
	}
	st.fail.Store(false)

	// Delta 3 uploads the base (into its own folder), delta 2 and itself.
	fillValues(t, v, 100, 150, 50, "three")
	want := readAll(t, p, 500)
	h3 := checkpointNow(t, p, st, 3)
	if d := deltas(h3); len(d) != 2 {
		t.Fatalf("checkpoint 3: deltas %v, want 2 (the failed one's included)", d)
	}
	for _, f := range h3.Files {
		if !f.Shared || !strings.HasPrefix(f.Name, "shared/op/"+p.Instance()+"/") {
			t.Errorf("file %+v not shared under the instance", f)
		}
	}
	if got := readAll(t, restoreFresh(t, st.fakeStorage, h3, smallPebble), 500); !maps.Equal(got, want) {
		t.Errorf("checkpoint 3 restored %d keys, want %d", len(got), len(want))
	}
	// Delta 4 references the base where checkpoint 3 put it.
	fillValues(t, v, 200, 210, 50, "four")
	h4 := checkpointNow(t, p, st, 4)
	if !slices.Equal(h4.Files[:len(h3.Files)], h3.Files) {
		t.Errorf("checkpoint 4 does not reference the files as checkpoint 3 uploaded them")
	}

	// A full chain ends in a base; the old chain's files go.
	based := false
	for i := range maxChainDeltas {
		fillValues(t, v, i, i+1, 50, fmt.Sprintf("c%d", i))
		h := checkpointNow(t, p, st, checkpoint.ID(5+i))
		if d := deltas(h); len(d) == 0 {
			based = true
			break
		} else if len(d) > maxChainDeltas {
			t.Fatalf("checkpoint %d has %d deltas, over the bound %d", 5+i, len(d), maxChainDeltas)
		}
	}
	if !based {
		t.Fatalf("no base in %d snapshots after a chain of 3 deltas", maxChainDeltas)
	}
	if _, err := os.Stat(base.dir); !os.IsNotExist(err) {
		t.Errorf("the old chain's base is still on disk: %v", err)
	}
	if _, err := os.Stat(base.chain.dir); !os.IsNotExist(err) {
		t.Errorf("the old chain's deltas are still on disk: %v", err)
	}
}

// BenchmarkPebbleCheckpointSmallChanges is one checkpoint of a task of the
// count job at 100 ms: 2,500 of its keys changed since the last one, the
// snapshot taken and uploaded to file storage (fsyncs included). "delta"
// is what a store whose value caches took every write does; "base" forces
// a base snapshot each time, as every checkpoint was before deltas. Its
// ns/op is the CPU and wait a checkpoint costs the task.
func BenchmarkPebbleCheckpointSmallChanges(b *testing.B) {
	for _, kind := range []string{"delta", "base"} {
		b.Run(kind, func(b *testing.B) {
			st, err := checkpoint.NewFile(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			p := openTestPebble(b, PebbleOptions{})
			v := mustValue(b, p, "count")
			const keys, changed = 10_000, 2_500
			var val [8]byte
			for i := range keys {
				if err := v.Put(k(i), val[:]); err != nil {
					b.Fatal(err)
				}
			}
			id := checkpoint.ID(0)
			snap := func() {
				id++
				s, err := p.Snapshot(id)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Upload(context.Background(), st, fmt.Sprintf("chk-%d/count/", id), "shared/count/"); err != nil {
					b.Fatal(err)
				}
				s.Release()
			}
			snap()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for range changed {
					val[0]++
					if err := v.Put(k(n%keys), val[:]); err != nil {
						b.Fatal(err)
					}
					n++
				}
				if kind == "base" {
					p.dbWritten = true
				}
				snap()
			}
		})
	}
}

// TestPebbleDeltaHandleRefusedByOlderBuilds: a handle with deltas names
// its backend "pebble-delta", which a build from before deltas refuses to
// restore (it would open the base and drop the deltas); one without is
// "pebble". A "pebble" handle that lists a delta is refused here too.
func TestPebbleDeltaHandleRefusedByOlderBuilds(t *testing.T) {
	st := newFakeStorage()
	p := openTestPebble(t, smallPebble)
	v := mustValue(t, p, "v")
	fillValues(t, v, 0, 100, 50, "one")
	if h := checkpointNow(t, p, st, 1); h.Backend != "pebble" {
		t.Fatalf("base handle's backend %q, want pebble", h.Backend)
	}
	fillValues(t, v, 0, 10, 50, "two")
	h := checkpointNow(t, p, st, 2)
	if h.Backend != deltaBackend || len(deltas(h)) != 1 {
		t.Fatalf("delta handle: backend %q, deltas %v", h.Backend, deltas(h))
	}
	h.Backend = "pebble"
	q := openTestPebble(t, smallPebble)
	mustValue(t, q, "v")
	if err := q.Restore(context.Background(), st, h); err == nil || !strings.Contains(err.Error(), "delta file") {
		t.Fatalf("restore of a pebble handle with a delta: %v", err)
	}
}

// TestPebbleDeltaHeldInMemory: a delta goes from memory to storage, with no
// local file on the barrier's path, so a checkpoint whose changes the value
// caches held completes with the disk full, and restores them. A store
// whose DeltaMemory is negative writes every delta to a local file first:
// the disk's error fails its checkpoint, and the next, once the disk is
// back, restores every change.
func TestPebbleDeltaHeldInMemory(t *testing.T) {
	for _, tc := range []struct {
		name        string
		deltaMemory int64
		held        bool
	}{{"default", 0, true}, {"none", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			faults, set := testFaults(t)
			opts := smallPebble
			opts.FS = faults.Wrap(vfs.Default)
			opts.DeltaMemory = tc.deltaMemory
			p := openTestPebble(t, opts)
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			v := mustValue(t, p, "v")
			fillValues(t, v, 0, 500, 100, "a")
			checkpointNow(t, p, st, 1)

			set(diskfault.ENOSPC)
			fillValues(t, v, 0, 100, 100, "b")
			h, err := tryCheckpoint(p, st, 2)
			want := readAll(t, p, 500)
			set(diskfault.None)
			switch {
			case tc.held && err != nil:
				t.Fatalf("checkpoint 2, its delta held in memory, during the fault: %v", err)
			case tc.held:
				if len(deltas(h)) != 1 {
					t.Fatalf("checkpoint 2: deltas %v, want 1", deltas(h))
				}
				if _, err := os.Stat(p.chain.dir); !os.IsNotExist(err) {
					t.Fatalf("a delta held in memory left its chain's directory on disk: %v", err)
				}
			case !errors.Is(err, syscall.ENOSPC):
				t.Fatalf("checkpoint 2, its delta to a local file, during the fault: %v, want ENOSPC", err)
			default:
				fillValues(t, v, 100, 200, 100, "c")
				want = readAll(t, p, 500)
				h = checkpointNow(t, p, st, 3)
			}
			if got := readAll(t, restoreFresh(t, st, h, smallPebble), 500); !maps.Equal(got, want) {
				t.Fatalf("restored %d keys, want %d", len(got), len(want))
			}
		})
	}
}

// TestPebbleDeltaMemoryBound: deltas whose uploads fail stay in memory up
// to DeltaMemory, then go to local files; the first upload that succeeds
// takes them all, from memory and from files, and lets go of their bytes.
func TestPebbleDeltaMemoryBound(t *testing.T) {
	opts := smallPebble
	opts.DeltaMemory = 64 << 10
	p := openTestPebble(t, opts)
	st := &failingPuts{fakeStorage: newFakeStorage()}
	v := mustValue(t, p, "v")
	fillValues(t, v, 0, 500, 100, "a")
	checkpointNow(t, p, st, 1)

	st.fail.Store(true)
	for id := checkpoint.ID(2); id <= 5; id++ {
		fillValues(t, v, 0, 200, 100, fmt.Sprint("b", id)) // about 25 KiB a delta
		if _, err := tryCheckpoint(p, st, id); err == nil {
			t.Fatalf("checkpoint %d uploaded while storage fails", id)
		}
	}
	c := p.chain
	c.mu.Lock()
	var inMemory, inFiles int
	for _, d := range c.deltas {
		if d.data != nil {
			inMemory++
		} else {
			inFiles++
		}
	}
	held := c.held
	c.mu.Unlock()
	if held > opts.DeltaMemory || inMemory == 0 || inFiles == 0 {
		t.Fatalf("after 4 failed uploads: %d deltas in memory (%d bytes, bound %d), %d in files; want both, within the bound",
			inMemory, held, opts.DeltaMemory, inFiles)
	}

	st.fail.Store(false)
	h := checkpointNow(t, p, st, 6)
	if n := len(deltas(h)); n != 4 {
		t.Fatalf("checkpoint 6: %d deltas, want 4 (the failed checkpoints' changes)", n)
	}
	c.mu.Lock()
	held = c.held
	c.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d bytes of deltas still held after their upload", held)
	}
	want := readAll(t, p, 500)
	if got := readAll(t, restoreFresh(t, st, h, smallPebble), 500); !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
}
