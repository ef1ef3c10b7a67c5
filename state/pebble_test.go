package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

func openTestPebble(t testing.TB, opts PebbleOptions) *Pebble {
	t.Helper()
	p, err := OpenPebble(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// smallPebble makes Pebble flush and compact often, so that tests with little
// data still see many SSTs.
var smallPebble = PebbleOptions{MemTableSize: 256 << 10, CacheSize: 1 << 20}

// pebbleCuts are the cuts the snapshot tests run with.
var pebbleCuts = []PebbleCut{PebbleCutWAL, PebbleCutFlush}

// withCut returns opts with cut c.
func withCut(opts PebbleOptions, c PebbleCut) PebbleOptions {
	opts.Cut = c
	return opts
}

// backendKinds are the backends the contract tests run on.
var backendKinds = []struct {
	name string
	open func(t testing.TB) Backend
}{
	{"memory", func(t testing.TB) Backend { return OpenMemory(MemoryOptions{}) }},
	{"pebble", func(t testing.TB) Backend { return openTestPebble(t, smallPebble) }},
	{"pebble-flush", func(t testing.TB) Backend { return openTestPebble(t, withCut(smallPebble, PebbleCutFlush)) }},
}

// trickyKeys are keys whose encodings could collide or misorder: the empty
// key, zero bytes, prefixes of each other, 0xff.
var trickyKeys = []string{"", "\x00", "\x00\x00", "\x00\x01", "\x00\xff", "a", "a\x00", "a\x00\x01", "a\x00b", "a\x01", "ab", "b", "\xff", "\xff\xff", "\xff\x00"}

// dumpKeys reads tables named in names through the contract only, for every
// key of universe. Maps are read with Scan, which must be in (key, userKey)
// order and agree with Iterate.
func dumpKeys(t *testing.T, b Backend, names []string, universe []string) *model {
	t.Helper()
	d := newModel()
	for _, name := range names {
		switch name[0] {
		case 'v':
			tab := mustValue(t, b, name)
			d.values[name] = map[string]string{}
			for _, k := range universe {
				v, ok, err := tab.Get([]byte(k))
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					d.values[name][k] = string(v)
				}
			}
		case 'l':
			tab := mustList(t, b, name)
			d.lists[name] = map[string][]string{}
			for _, k := range universe {
				var l []string
				if err := tab.Iterate([]byte(k), func(v []byte) error { l = append(l, string(v)); return nil }); err != nil {
					t.Fatal(err)
				}
				if l != nil {
					d.lists[name][k] = l
				}
			}
		case 'm':
			tab := mustMap(t, b, name)
			d.maps[name] = map[string]map[string]string{}
			var prevK, prevU []byte
			first := true
			err := tab.Scan(func(k, uk, v []byte) error {
				if c := bytes.Compare(k, prevK); !first && (c < 0 || c == 0 && bytes.Compare(uk, prevU) <= 0) {
					return fmt.Errorf("%s: Scan out of order: (%q, %q) after (%q, %q)", name, k, uk, prevK, prevU)
				}
				first, prevK, prevU = false, bytes.Clone(k), bytes.Clone(uk)
				if d.maps[name][string(k)] == nil {
					d.maps[name][string(k)] = map[string]string{}
				}
				d.maps[name][string(k)][string(uk)] = string(v)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range universe {
				var got []string
				tab.Iterate([]byte(k), func(uk, v []byte) error { got = append(got, string(uk)+"="+string(v)); return nil })
				var want []string
				for _, uk := range slices.Sorted(maps.Keys(d.maps[name][k])) {
					want = append(want, uk+"="+d.maps[name][k][uk])
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: Iterate(%q) = %q, Scan has %q", name, k, got, want)
				}
			}
		}
	}
	return d
}

// TestBackendContract runs one script of operations on every backend and
// checks each against the same expectations.
func TestBackendContract(t *testing.T) {
	for _, kind := range backendKinds {
		t.Run(kind.name, func(t *testing.T) {
			b := kind.open(t)
			v, l, m := mustValue(t, b, "v"), mustList(t, b, "l"), mustMap(t, b, "m")
			for i, k := range trickyKeys {
				v.Put([]byte(k), []byte("v"+k))
				l.Append([]byte(k), []byte(k))
				l.Append([]byte(k), nil)
				l.Append([]byte(k), []byte(strconv.Itoa(i)))
				for _, uk := range trickyKeys {
					m.Put([]byte(k), []byte(uk), []byte(k+"|"+uk))
				}
			}
			v.Delete([]byte("a"))
			l.Delete([]byte("a\x00"))
			l.Append([]byte("a\x00"), []byte("again"))
			m.Clear([]byte("a")) // must not touch "a\x00..." or "ab"
			m.Delete([]byte("b"), []byte(""))
			m.Delete([]byte("b"), []byte("never there"))

			if got, ok, err := v.Get([]byte("a")); ok || err != nil {
				t.Errorf("deleted value: %q %v %v", got, ok, err)
			}
			if got, ok, _ := v.Get([]byte("\x00")); !ok || string(got) != "v\x00" {
				t.Errorf("Get(0x00) = %q %v", got, ok)
			}
			var items []string
			l.Iterate([]byte("\x00\x01"), func(x []byte) error { items = append(items, string(x)); return nil })
			if want := []string{"\x00\x01", "", "3"}; !slices.Equal(items, want) {
				t.Errorf("list = %q, want %q", items, want)
			}
			items = nil
			l.Iterate([]byte("a\x00"), func(x []byte) error { items = append(items, string(x)); return nil })
			if want := []string{"again"}; !slices.Equal(items, want) {
				t.Errorf("list after delete+append = %q, want %q", items, want)
			}
			stop := errors.New("stop")
			if err := l.Iterate([]byte("b"), func([]byte) error { return stop }); err != stop {
				t.Errorf("Iterate returns %v, want fn's error", err)
			}
			if err := m.Iterate([]byte("b"), func(_, _ []byte) error { return stop }); err != stop {
				t.Errorf("map Iterate returns %v, want fn's error", err)
			}
			if err := m.Scan(func(_, _, _ []byte) error { return stop }); err != stop {
				t.Errorf("Scan returns %v, want fn's error", err)
			}
			d := dumpKeys(t, b, []string{"v", "l", "m"}, trickyKeys)
			if _, ok := d.maps["m"]["a"]; ok {
				t.Error("Clear(a) left entries")
			}
			for _, k := range []string{"a\x00", "ab", "a\x01"} {
				if len(d.maps["m"][k]) != len(trickyKeys) {
					t.Errorf("Clear(a) changed key %q: %d entries", k, len(d.maps["m"][k]))
				}
			}
			if len(d.maps["m"]["b"]) != len(trickyKeys)-1 {
				t.Errorf("map b has %d entries", len(d.maps["m"]["b"]))
			}
			if _, err := b.List("v"); err == nil {
				t.Error("declaring a value table's name as a list succeeded")
			}
			if _, err := b.Map("a/b"); err == nil {
				t.Error("a name with a slash was accepted")
			}
		})
	}
}

// TestPebbleAgainstMemory runs random operations, snapshots and restores on
// the Pebble and the memory backend side by side; every state, live or
// restored, must be the same. STATE_SEED=n replays a run. The runs with
// a value cache of 512 bytes a table spill it every few writes, between
// the writes of the other tables that share its keys' rows (see keyRow).
func TestPebbleAgainstMemory(t *testing.T) {
	seed := testSeed(t)
	for _, cut := range pebbleCuts {
		for _, cache := range []int{0, 512} {
			for run := range 2 {
				name := fmt.Sprintf("%v/%d", cut, run)
				if cache > 0 {
					name = fmt.Sprintf("%v/cache-%d/%d", cut, cache, run)
				}
				t.Run(name, func(t *testing.T) {
					pebbleRandomRun(t, rand.New(rand.NewPCG(seed, uint64(run))), 1000, PebbleOptions{Cut: cut, valueCache: cache})
				})
			}
		}
	}
}

// memoryAndPebble is a memory backend and a Pebble one, run side by side.
type memoryAndPebble struct{ mem, peb Backend }

// restore restores the memory backend from mem and the Pebble one from peb.
func (b memoryAndPebble) restore(t *testing.T, st checkpoint.Storage, mem, peb checkpoint.StateHandle) {
	t.Helper()
	if err := b.mem.Restore(context.Background(), st, mem); err != nil {
		t.Fatal(err)
	}
	if err := b.peb.Restore(context.Background(), st, peb); err != nil {
		t.Fatal(err)
	}
}

// declareShuffled declares the tables names (v…: value, l…: list, m…: map)
// on b in an order of r's: it differs between instances, so that table ids
// do.
func declareShuffled(t *testing.T, r *rand.Rand, b Backend, names []string) {
	order := slices.Clone(names)
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, n := range order {
		switch n[0] {
		case 'v':
			mustValue(t, b, n)
		case 'l':
			mustList(t, b, n)
		case 'm':
			mustMap(t, b, n)
		}
	}
}

func pebbleRandomRun(t *testing.T, r *rand.Rand, steps int, opts PebbleOptions) {
	ctx := context.Background()
	st := newFakeStorage()
	names := []string{"va", "vb", "la", "lb", "ma", "mb"}
	universe := slices.Clone(trickyKeys)
	for i := range 40 {
		universe = append(universe, strconv.Itoa(i))
	}
	opts.MemTableSize, opts.CacheSize = 64<<10, 1<<20
	open := func() memoryAndPebble { return memoryAndPebble{OpenMemory(MemoryOptions{}), openTestPebble(t, opts)} }
	declare := func(b Backend) { declareShuffled(t, r, b, names) }
	cur := open()
	declare(cur.mem)
	declare(cur.peb)
	// Each Pebble cut is held until the next snapshot, upload or restore,
	// so that the operations in between run in its write window.
	var gates []chan struct{}
	openGates := func() {
		for _, g := range gates {
			close(g)
		}
		gates = nil
	}
	defer openGates() // also when the test fails: Close waits for the cut
	type snap struct{ mem, peb Snapshot }
	type done struct{ mem, peb checkpoint.StateHandle }
	var out []snap
	var uploaded []done
	var id checkpoint.ID
	key := func() []byte { return []byte(universe[r.IntN(len(universe))]) }
	val := func() []byte { return []byte(strings.Repeat(strconv.Itoa(r.IntN(1000)), r.IntN(40))) }
	both := func(fn func(b Backend)) { fn(cur.mem); fn(cur.peb) }
	pick := func(kind string) string { return kind + []string{"a", "b"}[r.IntN(2)] }
	check := func(step int, what string) {
		got, want := dumpKeys(t, cur.peb, names, universe), dumpKeys(t, cur.mem, names, universe)
		if !got.equal(want) {
			t.Fatalf("step %d (%s): pebble differs from memory\n got %v\nwant %v", step, what, got, want)
		}
	}
	for step := range steps {
		switch op := r.IntN(100); {
		case op < 25:
			n, k, v := pick("v"), key(), val()
			both(func(b Backend) { mustValue(t, b, n).Put(k, v) })
		case op < 30:
			n, k := pick("v"), key()
			both(func(b Backend) { mustValue(t, b, n).Delete(k) })
		case op < 50:
			n, k, v := pick("l"), key(), val()
			both(func(b Backend) { mustList(t, b, n).Append(k, v) })
		case op < 53:
			n, k := pick("l"), key()
			both(func(b Backend) { mustList(t, b, n).Delete(k) })
		case op < 75:
			n, k, uk, v := pick("m"), key(), key(), val()
			both(func(b Backend) { mustMap(t, b, n).Put(k, uk, v) })
		case op < 82:
			n, k, uk := pick("m"), key(), key()
			both(func(b Backend) { mustMap(t, b, n).Delete(k, uk) })
		case op < 84:
			n, k := pick("m"), key()
			both(func(b Backend) { mustMap(t, b, n).Clear(k) })
		case op < 88:
			if len(out) < 3 {
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
				out = append(out, snap{sm, sp})
			}
		case op < 93:
			if len(out) > 0 {
				i := r.IntN(len(out))
				s := out[i]
				out = slices.Delete(out, i, i+1)
				openGates()
				dir := fmt.Sprintf("chk-%d/", step)
				hm, err := s.mem.Upload(ctx, st, dir+"mem/", "shared/mem/")
				if err != nil {
					t.Fatal(err)
				}
				hp, err := s.peb.Upload(ctx, st, dir+"peb/", "shared/peb/")
				if err != nil {
					t.Fatal(err)
				}
				s.mem.Release()
				s.peb.Release()
				if hp.Incremental > hp.Size || hp.Backend != "pebble" && hp.Backend != deltaBackend {
					t.Fatalf("step %d: handle %+v", step, hp)
				}
				uploaded = append(uploaded, done{hm, hp})
			}
		case op < 95:
			if len(uploaded) > 0 {
				openGates()
				d := uploaded[r.IntN(len(uploaded))]
				if r.IntN(2) == 0 {
					// In place, as after a failure; outstanding snapshots live on.
					cur.restore(t, st, d.mem, d.peb)
				} else {
					next := open()
					declare(next.mem)
					declare(next.peb)
					next.restore(t, st, d.mem, d.peb)
					cur.peb.Close()
					cur = next
				}
				check(step, "restored")
			}
		default:
			check(step, "live")
		}
	}
	check(steps, "end")
	openGates()
	for _, s := range out {
		s.mem.Release()
		s.peb.Release()
	}
}

// fillValues writes keys [from, to) with incompressible values of size
// bytes, so that SST sizes follow the bytes written.
func fillValues(t testing.TB, v ValueTable, from, to, size int, tag string) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(from), uint64(to)))
	val := make([]byte, size)
	for i := from; i < to; i++ {
		for j := range val {
			val[j] = byte(r.Uint32())
		}
		copy(val, fmt.Sprintf("%s-%d-", tag, i))
		if err := v.Put(k(i), val); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t testing.TB, b Backend, n int) map[string]string {
	t.Helper()
	v := mustValue(t, b, "v")
	out := map[string]string{}
	for i := range n {
		got, ok, err := v.Get(k(i))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			out[string(k(i))] = string(got)
		}
	}
	return out
}

func names(refs []checkpoint.FileRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func restoreFresh(t *testing.T, st checkpoint.Storage, h checkpoint.StateHandle, opts PebbleOptions) *Pebble {
	t.Helper()
	q := openTestPebble(t, opts)
	mustValue(t, q, "v")
	if err := q.Restore(context.Background(), st, h); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return q
}

// TestPebbleIncremental checks that a second checkpoint uploads only the
// files the first did not, that each checkpoint restores to exactly its own
// state on a fresh directory, and that a restored store references the
// restored files again without uploading them. Checkpoints 1 and 2 hold
// writes still in the memtable, which the cut must carry.
func TestPebbleIncremental(t *testing.T) {
	for _, cut := range pebbleCuts {
		t.Run(cut.String(), func(t *testing.T) { testPebbleIncremental(t, withCut(smallPebble, cut)) })
	}
}

func testPebbleIncremental(t *testing.T, opts PebbleOptions) {
	ctx := context.Background()
	st := newFakeStorage()
	p := openTestPebble(t, opts)
	v := mustValue(t, p, "v")
	const n = 2000
	fillValues(t, v, 0, n, 200, "one")
	// Settle the LSM the way a long-running store is: most data in the
	// bottom level, where small increments do not touch it.
	if err := p.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		t.Fatal(err)
	}
	if err := p.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	if opts.Cut == PebbleCutWAL {
		// In the memtable only, and partly overwritten after Snapshot. (With
		// the flush cut this would be one more L0 file, and the restored
		// store of checkpoint 3 could compact the files it should reuse.)
		fillValues(t, v, n, n+20, 200, "one")
	}
	want1 := readAll(t, p, 2*n)
	s1, err := p.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	// Writes after Snapshot must not reach it, even before its upload.
	fillValues(t, v, 0, n/100, 200, "two") // 1% updated
	fillValues(t, v, n+10, n+10+n/100, 200, "two")
	v.Delete(k(n - 1))
	want2 := readAll(t, p, 2*n)
	// This test is of base snapshots (a DB write makes one; the caches'
	// changes alone would make a delta: TestPebbleDeltaSnapshots).
	p.dbWritten = true

	h1, err := s1.Upload(ctx, st, "chk-1/op/", "shared/op/")
	s1.Release()
	if err != nil {
		t.Fatal(err)
	}
	if h1.Incremental != h1.Size {
		t.Errorf("first checkpoint: incremental %d, size %d", h1.Incremental, h1.Size)
	}
	s2, err := p.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	before := slices.Collect(maps.Keys(st.objs))
	h2, err := s2.Upload(ctx, st, "chk-2/op/", "shared/op/")
	s2.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s1.(*PebbleSnapshot).dir); !os.IsNotExist(err) {
		t.Errorf("Release left the checkpoint directory of a base no chain holds: %v", err)
	}
	if _, err := os.Stat(s2.(*PebbleSnapshot).dir); err != nil {
		t.Errorf("the checkpoint directory of the chain's base is gone: %v", err)
	}

	// What the second upload wrote: its mutable files and the SSTs the first
	// did not have; nothing else.
	var newObjs []string
	for name := range st.objs {
		if !slices.Contains(before, name) {
			newObjs = append(newObjs, name)
		}
	}
	slices.Sort(newObjs)
	in1 := map[string]checkpoint.FileRef{}
	for _, f := range h1.Files {
		in1[f.Local] = f
	}
	var wantNew []string
	var wantInc int64
	sharedFiles := 0
	for _, f := range h2.Files {
		switch {
		case !f.Shared:
			t.Errorf("file %+v not shared", f)
		case !isShared(f.Local):
			if want := "shared/op/" + p.Instance() + "/snap-2/" + f.Local; f.Name != want {
				t.Errorf("mutable file named %s, want %s", f.Name, want)
			}
			wantNew, wantInc = append(wantNew, f.Name), wantInc+f.Size
		case in1[f.Local].Shared:
			sharedFiles++
			if in1[f.Local] != f {
				t.Errorf("shared file %s: %+v in checkpoint 1, %+v in 2", f.Local, in1[f.Local], f)
			}
		default:
			if want := "shared/op/" + p.Instance() + "/" + f.Local; f.Name != want || !isShared(f.Local) {
				t.Errorf("new shared file named %s, want %s", f.Name, want)
			}
			wantNew, wantInc = append(wantNew, f.Name), wantInc+f.Size
		}
	}
	slices.Sort(wantNew)
	if !slices.Equal(newObjs, wantNew) {
		t.Errorf("second upload wrote %q, want %q", newObjs, wantNew)
	}
	if h2.Incremental != wantInc || h2.Incremental >= h2.Size || sharedFiles == 0 {
		t.Errorf("second checkpoint: incremental %d (want %d), size %d, %d files reused", h2.Incremental, wantInc, h2.Size, sharedFiles)
	}
	t.Logf("checkpoint 1: %d files, %d bytes; checkpoint 2: %d files, %d bytes, %d uploaded", len(h1.Files), h1.Size, len(h2.Files), h2.Size, h2.Incremental)
	// With the WAL cut the unflushed writes travel in a log file, else in an
	// SST the flush wrote.
	for i, h := range []checkpoint.StateHandle{h1, h2} {
		var logBytes int64
		for _, f := range h.Files {
			if strings.HasSuffix(f.Local, ".log") {
				logBytes += f.Size
			}
		}
		if wal := opts.Cut == PebbleCutWAL; wal != (logBytes > 0) {
			t.Errorf("checkpoint %d (cut %v): %d bytes of WAL", i+1, opts.Cut, logBytes)
		}
	}

	// Each checkpoint restores to its own state.
	q1 := restoreFresh(t, st, h1, opts)
	if got := readAll(t, q1, 2*n); !maps.Equal(got, want1) {
		t.Errorf("checkpoint 1 restored %d keys, want %d (writes after Snapshot leaked?)", len(got), len(want1))
	}
	q2 := restoreFresh(t, st, h2, opts)
	if got := readAll(t, q2, 2*n); !maps.Equal(got, want2) {
		t.Errorf("checkpoint 2 restored %d keys, want %d", len(got), len(want2))
	}

	// A restored store references the restored SSTs where they are.
	fillValues(t, mustValue(t, q2, "v"), 2*n, 2*n+50, 200, "three")
	h3 := checkpointNow(t, q2, st, 3)
	in2 := map[string]checkpoint.FileRef{}
	for _, f := range h2.Files {
		in2[f.Local] = f
	}
	reused := 0
	var inc int64
	for _, f := range h3.Files {
		if old, ok := in2[f.Local]; ok && isShared(f.Local) {
			reused++
			if old != f {
				t.Errorf("restored file %s uploaded again: %+v, was %+v", f.Local, f, old)
			}
			continue
		}
		inc += f.Size
		if f.Shared && !strings.HasPrefix(f.Name, "shared/op/"+q2.Instance()+"/") {
			t.Errorf("new shared file %s not under the new instance %s", f.Name, q2.Instance())
		}
	}
	// How many restored SSTs survive to checkpoint 3 is up to Pebble's
	// compactions (the WAL replayed at restore is flushed, and L0 may be
	// compacted away); what must hold is that a surviving one is not
	// uploaded again, checked above.
	t.Logf("after restore: %d restored files reused by checkpoint 3", reused)
	if h3.Incremental != inc || q2.Instance() == p.Instance() {
		t.Errorf("after restore: %d files reused, incremental %d (want %d), instances %s %s", reused, h3.Incremental, inc, q2.Instance(), p.Instance())
	}
	want3 := readAll(t, q2, 3*n)
	if got := readAll(t, restoreFresh(t, st, h3, opts), 3*n); !maps.Equal(got, want3) {
		t.Errorf("checkpoint 3 restored %d keys, want %d", len(got), len(want3))
	}
}

// TestPebbleRestoreBadFile corrupts or removes one file of a checkpoint:
// Restore fails naming it and leaves the current state alone.
func TestPebbleRestoreBadFile(t *testing.T) {
	ctx := context.Background()
	p := openTestPebble(t, smallPebble)
	fillValues(t, mustValue(t, p, "v"), 0, 2000, 100, "x")
	if err := p.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		t.Fatal(err)
	}
	if err := p.db.Flush(); err != nil { // SSTs to damage, whatever the cut
		t.Fatal(err)
	}
	s, err := p.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	tests := []struct {
		name    string
		shared  bool
		damage  func(st *fakeStorage, obj string)
		wantErr error
	}{
		{"flipped byte in an SST", true, func(st *fakeStorage, obj string) { st.objs[obj][len(st.objs[obj])/2] ^= 1 }, checkpoint.ErrCorrupt},
		{"truncated MANIFEST", false, func(st *fakeStorage, obj string) { st.objs[obj] = st.objs[obj][:len(st.objs[obj])-1] }, checkpoint.ErrCorrupt},
		{"missing SST", true, func(st *fakeStorage, obj string) { delete(st.objs, obj) }, checkpoint.ErrNotFound},
	}
	// One storage: the snapshot uploads each SST once.
	st := newFakeStorage()
	h, err := s.Upload(ctx, st, "chk-1/op/", "shared/op/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var victim checkpoint.FileRef
			for _, f := range h.Files {
				if isShared(f.Local) == tt.shared && (tt.shared || strings.HasPrefix(f.Local, "MANIFEST")) {
					victim = f
				}
			}
			saved := bytes.Clone(st.objs[victim.Name])
			defer func() { st.objs[victim.Name] = saved }()
			tt.damage(st, victim.Name)
			q := openTestPebble(t, smallPebble)
			qv := mustValue(t, q, "v")
			qv.Put([]byte("mine"), []byte("kept"))
			err = q.Restore(ctx, st, h)
			if err == nil || !strings.Contains(err.Error(), victim.Name) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Restore = %v; want an error naming %s that wraps %v", err, victim.Name, tt.wantErr)
			}
			if got, ok, _ := qv.Get([]byte("mine")); !ok || string(got) != "kept" {
				t.Errorf("failed restore changed the state: %q %v", got, ok)
			}
			entries, _ := os.ReadDir(q.dir)
			for _, e := range entries {
				if e.Name() != filepath.Base(q.dbDir) && e.Name() != "snap" {
					t.Errorf("failed restore left %s", e.Name())
				}
			}
		})
	}
}

// TestPebbleRestoreTables restores into a backend that declared its tables
// in another order (other ids) and one more table; the snapshot's tables keep
// their content and the new one is empty; a kind mismatch fails.
func TestPebbleRestoreTables(t *testing.T) {
	ctx := context.Background()
	st := newFakeStorage()
	p := openTestPebble(t, smallPebble)
	mustValue(t, p, "a").Put([]byte("k"), []byte("a"))
	mustMap(t, p, "b").Put([]byte("k"), []byte("u"), []byte("b"))
	mustList(t, p, "undeclared later").Append([]byte("k"), []byte("l"))
	s, _ := p.Snapshot(1)
	h, err := s.Upload(ctx, st, "chk-1/", "shared/")
	s.Release()
	if err != nil {
		t.Fatal(err)
	}

	q := openTestPebble(t, smallPebble)
	c, b, a := mustValue(t, q, "c"), mustMap(t, q, "b"), mustValue(t, q, "a")
	c.Put([]byte("k"), []byte("gone after restore"))
	if err := q.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := a.Get([]byte("k")); string(got) != "a" {
		t.Errorf("a = %q", got)
	}
	if got, _, _ := b.Get([]byte("k"), []byte("u")); string(got) != "b" {
		t.Errorf("b = %q", got)
	}
	if got, ok, _ := c.Get([]byte("k")); ok {
		t.Errorf("c = %q, want empty", got)
	}
	c.Put([]byte("k"), []byte("c"))
	var items []string
	mustList(t, q, "undeclared later").Iterate([]byte("k"), func(v []byte) error { items = append(items, string(v)); return nil })
	if !slices.Equal(items, []string{"l"}) {
		t.Errorf("table declared after restore: %q", items)
	}
	if got, _, _ := a.Get([]byte("k")); string(got) != "a" {
		t.Errorf("a = %q after writing c: ids collide", got)
	}

	r := openTestPebble(t, smallPebble)
	mustList(t, r, "a")
	if err := r.Restore(ctx, st, h); err == nil || !strings.Contains(err.Error(), `"a" is list state here, value in the snapshot`) {
		t.Errorf("kind mismatch: %v", err)
	}
	if err := r.Restore(ctx, st, checkpoint.StateHandle{Backend: "memory"}); err == nil {
		t.Error("restored a memory handle")
	}
}

// TestPebbleHandlesAndTimers runs typed handles and timers on Pebble through
// a checkpoint and restore.
func TestPebbleHandlesAndTimers(t *testing.T) {
	ctx := context.Background()
	st := newFakeStorage()
	p := openTestPebble(t, smallPebble)
	scope := &KeyScope{}
	count, _ := NewValue(p, scope, "count", Int64())
	events, _ := NewList(p, scope, "events", String())
	hours, _ := NewMap(p, scope, "hours", Int64(), Float64())
	tm, err := NewTimers(p, scope, "timers")
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"a", "b", "a\x00", "a"} {
		scope.Set([]byte(key))
		n, _, _ := count.Get()
		count.Set(n + 1)
		events.Add(fmt.Sprint(i))
		for _, h := range []int64{5, -3, 100, 0, -300} {
			hours.Put(h, float64(h)+float64(i))
		}
		tm.Register(timeAt(int64(10 + i)))
		tm.Register(timeAt(int64(10 + i))) // one timer
	}
	scope.Set([]byte("b"))
	tm.Delete(timeAt(11))
	snap, _ := p.Snapshot(1)
	h, err := snap.Upload(ctx, st, "chk-1/", "shared/")
	snap.Release()
	if err != nil {
		t.Fatal(err)
	}

	q := openTestPebble(t, PebbleOptions{})
	scope2 := &KeyScope{}
	count2, _ := NewValue(q, scope2, "count", Int64())
	events2, _ := NewList(q, scope2, "events", String())
	hours2, _ := NewMap(q, scope2, "hours", Int64(), Float64())
	tm2, _ := NewTimers(q, scope2, "timers")
	if err := q.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if err := tm2.Rebuild(); err != nil {
		t.Fatal(err)
	}
	scope2.Set([]byte("a"))
	if n, ok, _ := count2.Get(); n != 2 || !ok {
		t.Errorf("count(a) = %d %v", n, ok)
	}
	if got, _ := events2.All(); !slices.Equal(got, []string{"0", "3"}) {
		t.Errorf("events(a) = %q", got)
	}
	var keys []int64
	hours2.Range(func(k int64, v float64) error { keys = append(keys, k); return nil })
	if !slices.Equal(keys, []int64{-300, -3, 0, 5, 100}) {
		t.Errorf("hours(a) keys = %v, want numeric order", keys)
	}
	got := fireAll(t, tm2, scope2, 100, nil)
	want := []firing{{"a", 10}, {"a\x00", 12}, {"a", 13}}
	if !slices.Equal(got, want) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestPebbleOpenAndClose(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []PebbleOptions{{MemTableSize: -1}, {CacheSize: -1}, {UploadParallelism: -1}, {MemTableSize: 4 << 30}, {Cut: -1}, {Cut: PebbleCutFlush + 1}} {
		if _, err := OpenPebble(dir, bad); err == nil {
			t.Errorf("OpenPebble accepted %+v", bad)
		}
	}
	p, err := OpenPebble(dir, PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustValue(t, p, "v").Put([]byte("k"), []byte("stale"))
	s, err := p.Snapshot(1) // left behind, as by a crash
	if err != nil {
		t.Fatal(err)
	}
	s.(*PebbleSnapshot).CutTime() // the cut is done
	p.db.Close()
	p.lock.Close() // as the end of a killed process would
	keep := filepath.Join(dir, "not-ours")
	os.WriteFile(keep, nil, 0o644)

	// A new backend in the same directory starts empty: local files, WAL
	// included, are no truth.
	b, err := NewPebble(PebbleOptions{})(0, "op", dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := mustValue(t, b, "v").Get([]byte("k")); ok {
		t.Errorf("new backend sees %q", got)
	}
	// The snapshot is gone at once; the earlier DB stays for a Restore to
	// reuse, until Close.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // its DB, the earlier one, and not-ours
		t.Errorf("directory holds %v", entries)
	}
	if b.Name() != "pebble" {
		t.Errorf("Name() = %q", b.Name())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 2 || entries[0].Name() != filepath.Base(b.(*Pebble).dbDir) || entries[1].Name() != "not-ours" {
		t.Errorf("after Close, directory holds %v; want its DB (kept for the next backend) and not-ours", entries)
	}
	if _, err := b.Value("v"); !errors.Is(err, ErrClosed) {
		t.Errorf("Value after Close: %v", err)
	}
	if _, err := b.Snapshot(2); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot after Close: %v", err)
	}
}

// TestPebbleLargerThanMemory keeps 16 times the memtable and the block cache
// in state, checkpoints it with writes going on, restores it on a fresh
// directory and reads every key back.
func TestPebbleLargerThanMemory(t *testing.T) {
	for _, cut := range pebbleCuts {
		t.Run(cut.String(), func(t *testing.T) {
			testPebbleLargerThanMemory(t, PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20, Cut: cut})
		})
	}
}

func testPebbleLargerThanMemory(t *testing.T, opts PebbleOptions) {
	ctx := context.Background()
	st, err := checkpoint.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := openTestPebble(t, opts)
	v := mustValue(t, p, "v")
	const n, size = 32 << 10, 512 // 16 MiB of values
	fillValues(t, v, 0, n/2, size, "a")
	s1, err := p.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	fillValues(t, v, n/2, n, size, "a")
	h1, err := s1.Upload(ctx, st, "chk-1/op/", "shared/op/")
	s1.Release()
	if err != nil {
		t.Fatal(err)
	}
	h2 := checkpointNow(t, p, st, 2)
	if h2.Size < n*size {
		t.Errorf("checkpoint 2: size %d; wrote %d bytes", h2.Size, n*size)
	}
	// Whether checkpoint 2 shares files with 1 depends on what compactions
	// rewrote meanwhile; a checkpoint after a few more writes must share
	// nearly all of 2's.
	fillValues(t, v, 0, 16, size, "b")
	h3 := checkpointNow(t, p, st, 3)
	if h3.Incremental*10 > h3.Size {
		t.Errorf("checkpoint 3 after 16 writes: size %d, incremental %d", h3.Size, h3.Incremental)
	}
	t.Logf("checkpoint 1: %d bytes in %d files; checkpoint 2: %d bytes in %d files, %d uploaded; checkpoint 3: %d uploaded",
		h1.Size, len(h1.Files), h2.Size, len(h2.Files), h2.Incremental, h3.Incremental)

	q, err := OpenPebble(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	qv := mustValue(t, q, "v")
	if err := q.Restore(ctx, st, h2); err != nil {
		t.Fatal(err)
	}
	var r *rand.Rand // as fillValues drew them
	want := make([]byte, size)
	for i := range n {
		if i == 0 {
			r = rand.New(rand.NewPCG(0, n/2))
		} else if i == n/2 {
			r = rand.New(rand.NewPCG(n/2, n))
		}
		for j := range want {
			want[j] = byte(r.Uint32())
		}
		copy(want, fmt.Sprintf("a-%d-", i))
		got, ok, err := qv.Get(k(i))
		if err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("key %d after restore: ok %v, err %v, equal %v", i, ok, err, bytes.Equal(got, want))
		}
	}
}

// checkpointNow snapshots b as checkpoint id and uploads the snapshot to st
// under chk-<id>/op/ (shared files under shared/op/).
func checkpointNow(t *testing.T, b Backend, st checkpoint.Storage, id checkpoint.ID) checkpoint.StateHandle {
	t.Helper()
	s, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	h, err := s.Upload(context.Background(), st, fmt.Sprintf("chk-%d/op/", id), "shared/op/")
	if err != nil {
		t.Fatal(err)
	}
	return h
}
