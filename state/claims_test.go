package state

import (
	"context"
	"strings"

	"bytes"
	"fmt"
	"github.com/weirstream/weir/checkpoint"
	"io"
	"maps"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"testing"
)

// hookView calls hook with the chunk the upload is about to serialise, while
// the upload holds its claim on it.
type hookView struct {
	tableView
	hook func(i int)
}

func (h hookView) appendChunk(b []byte, i int) []byte {
	h.hook(i)
	return h.tableView.appendChunk(b, i)
}

// TestClaimsEveryPath interleaves the upload of a snapshot, read a few KB at
// a time, with the owner's writes, so that chunks are serialised by the owner
// (written before the upload reached them), serialised by the upload and then
// written in place, and copied (written while the upload read them). The file
// must hold the state at the snapshot, and the live tables every write.
func TestClaimsEveryPath(t *testing.T) {
	const keySpace = 12000 // 16384 slots, which grow at 12288 keys: never here
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	b := OpenMemory(MemoryOptions{ExpectedKeys: keySpace})
	v, mp := mustValue(t, b, "v"), mustMap(t, b, "m")
	key := func() []byte { return fmt.Appendf(nil, "k%d", r.IntN(keySpace)) }
	val := func() []byte { return bytes.Repeat([]byte{'a' + byte(r.IntN(26))}, r.IntN(80)) }
	live := newModel()
	live.values["v"], live.maps["m"] = map[string]string{}, map[string]map[string]string{}
	del := func(name string, k []byte) {
		if name == "v" {
			v.Delete(k)
			delete(live.values["v"], string(k))
		} else {
			mp.Clear(k)
			delete(live.maps["m"], string(k))
		}
	}
	write := func() {
		k := key()
		switch n := r.IntN(10); {
		case n == 0:
			del("v", k)
		case n < 6:
			x := val()
			v.Put(k, x)
			live.values["v"][string(k)] = string(x)
		case n < 9:
			uk, x := key(), val()
			mp.Put(k, uk, x)
			if live.maps["m"][string(k)] == nil {
				live.maps["m"][string(k)] = map[string]string{}
			}
			live.maps["m"][string(k)][string(uk)] = string(x)
		default:
			del("m", k)
		}
	}
	for range 30000 {
		write()
	}
	want := dump(t, b)
	s, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	ms := s.(*memSnapshot)

	// The readers of both tables advance in turns, a few KB each, with writes
	// in between.
	copied := map[string]int{}
	readers := make([]*tableReader, len(ms.names))
	for ti, name := range ms.names {
		vm := b.tables[name].index()
		view := ms.views[ti]
		if ms.claims[ti] == nil {
			t.Fatalf("%s: no claims for a snapshot taken alone", name)
		}
		mask := vm.mask
		hooked := hookView{tableView: view, hook: func(i int) {
			if i%2 != 0 {
				return
			}
			// Write a key of chunk i (as it was at the snapshot) while the
			// upload holds it: the owner must copy the chunk.
			var vv valueView
			switch tv := view.(type) {
			case valueTableView:
				vv = tv.v
			case *mapTableView:
				vv = tv.idx
			}
			var k []byte
			for j := range vv.chunks[i] {
				if sl := &vv.chunks[i][j]; sl.hash != 0 {
					kk, _ := sl.kv(vv.exts)
					k = bytes.Clone(kk)
					break
				}
			}
			if k == nil {
				return
			}
			before := vm.chunks[i]
			del(name, k)
			if vm.mask != mask {
				t.Fatal("table grew; the test wants it not to")
			}
			if vm.chunks[i] == before {
				t.Fatalf("%s: write to chunk %d during its upload was made in place", name, i)
			}
			copied[name]++
		}}
		readers[ti] = newTableReader(name, ms.kinds[ti], hooked, ms.claims[ti])
	}
	files := make([][]byte, len(readers))
	buf := make([]byte, 2<<10)
	for open := len(readers); open > 0; {
		for ti, rd := range readers {
			if rd == nil {
				continue
			}
			n, err := rd.Read(buf)
			files[ti] = append(files[ti], buf[:n]...)
			if err == io.EOF {
				readers[ti] = nil
				open--
			} else if err != nil {
				t.Fatal(err)
			}
			for range 1 {
				write()
			}
		}
	}
	got := newModel()
	var paths [4]int // serialised by the owner, by the upload, copied, owner blocks read mid-upload
	for ti, name := range ms.names {
		claims := ms.claims[ti]
		var owner, uploaded int
		for i := range claims.state {
			switch claims.state[i].Load() {
			case chunkOwner:
				owner++
			case chunkUploaded:
				uploaded++
			default:
				t.Fatalf("%s: chunk %d ends in state %d", name, i, claims.state[i].Load())
			}
		}
		t.Logf("%s: %d chunks serialised by the owner, %d by the upload, %d copied; %d full blocks of the owner read mid-upload",
			name, owner, uploaded, copied[name], claims.handed)
		paths[0] += owner
		paths[1] += uploaded
		paths[2] += copied[name]
		paths[3] += claims.handed
		nb := OpenMemory(MemoryOptions{})
		tab, err := nb.decodeTable(name, files[ti])
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		nb.tables[name] = tab
		d := dump(t, nb)
		maps.Copy(got.values, d.values)
		maps.Copy(got.maps, d.maps)
	}
	// Over 200 seeds the fewest seen were 75, 25, 13 and 5.
	if slices.Contains(paths[:], 0) {
		t.Fatalf("a path was not taken (owner, upload, copied, owner blocks mid-upload): %v", paths)
	}
	if !got.equal(want) {
		t.Fatalf("uploaded state differs from the state at the snapshot\n got %v\nwant %v", got, want)
	}
	if d := dump(t, b); !d.equal(live) {
		t.Fatalf("live state differs from the writes made\n got %v\nwant %v", d, live)
	}
}

// trickle hands a Put's reader on in pieces of at most 512 bytes and yields
// between them, so that an upload on another goroutine interleaves with the
// owner's writes.
type trickle struct{ *fakeStorage }

func (tr trickle) Put(ctx context.Context, name string, r io.Reader) error {
	return tr.fakeStorage.Put(ctx, name, readFunc(func(p []byte) (int, error) {
		goruntime.Gosched()
		return r.Read(p[:min(len(p), 512)])
	}))
}

type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// TestClaimsConcurrent uploads snapshots of value, list and map tables on
// another goroutine while the owner keeps writing (and grows the tables):
// under -race it checks how chunkClaims orders the two, and each restored
// snapshot must equal the state at its snapshot.
func TestClaimsConcurrent(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	b := OpenMemory(MemoryOptions{})
	v, l, m := mustValue(t, b, "v"), mustList(t, b, "l"), mustMap(t, b, "m")
	keys := 20000
	write := func() {
		i := r.IntN(keys)
		val := fmt.Appendf(nil, "%d-%s", i, bytes.Repeat([]byte{'x'}, r.IntN(30)))
		switch r.IntN(8) {
		case 0:
			v.Delete(k(i))
		case 1, 2, 3:
			v.Put(k(i), val)
		case 4:
			l.Append(k(i%3000), val)
		case 5:
			l.Delete(k(i % 3000))
		case 6:
			m.Put(k(i%5000), k(r.IntN(10)), val)
		default:
			m.Clear(k(i % 5000))
		}
	}
	for range 60000 {
		write()
	}
	st := newFakeStorage()
	handed := 0
	type result struct {
		h   checkpoint.StateHandle
		err error
	}
	for round := range 6 {
		keys += 4000 // inserts grow the tables during some uploads
		want := dump(t, b)
		s, err := b.Snapshot(checkpoint.ID(round + 1))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan result, 1)
		go func() {
			h, err := s.Upload(ctx, trickle{st}, fmt.Sprintf("chk-%d/", round), "shared/")
			done <- result{h, err}
		}()
		var res result
	writing:
		for {
			select {
			case res = <-done:
				break writing
			default:
				write()
			}
		}
		for _, c := range s.(*memSnapshot).claims {
			handed += c.handed
		}
		s.Release()
		if res.err != nil {
			t.Fatal(res.err)
		}
		nb := OpenMemory(MemoryOptions{})
		if err := nb.Restore(ctx, st, res.h); err != nil {
			t.Fatal(err)
		}
		if got := dump(t, nb); !got.equal(want) {
			t.Fatalf("round %d: restored snapshot differs from the state at the snapshot", round)
		}
	}
	t.Logf("%d full blocks of the owner's read mid-upload", handed)
	if handed == 0 {
		t.Fatal("no full block of the owner's was read mid-upload: the test did not interleave")
	}
}

// TestUploadTwice: the first upload consumes what the owner serialised, so a
// second one fails instead of writing a file without it.
func TestUploadTwice(t *testing.T) {
	ctx := context.Background()
	b := OpenMemory(MemoryOptions{})
	v := mustValue(t, b, "v")
	for i := range 1000 {
		v.Put(k(i), []byte("x"))
	}
	want := dump(t, b)
	s, _ := b.Snapshot(1)
	defer s.Release()
	v.Put(k(1), []byte("y")) // the owner serialises k(1)'s chunk
	st := newFakeStorage()
	h, err := s.Upload(ctx, st, "a/", "shared/")
	if err != nil {
		t.Fatal(err)
	}
	nb := OpenMemory(MemoryOptions{})
	if err := nb.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if !dump(t, nb).equal(want) {
		t.Fatal("restored snapshot differs")
	}
	if _, err := s.Upload(ctx, st, "b/", "shared/"); err == nil || !strings.Contains(err.Error(), "uploaded twice") {
		t.Fatalf("second Upload: %v, want an error saying uploaded twice", err)
	}
}

// TestReleaseDropsClaims: a released snapshot's claims keep neither the
// owner's blocks nor the view (which holds the chunks the table replaced)
// until the next snapshot.
func TestReleaseDropsClaims(t *testing.T) {
	b := OpenMemory(MemoryOptions{})
	v := mustValue(t, b, "v")
	for i := range 1000 {
		v.Put(k(i), []byte("x"))
	}
	s, _ := b.Snapshot(1)
	v.Put(k(1), []byte("y"))
	c := b.tables["v"].index().claims
	if c == nil || c.cur == nil {
		t.Fatal("the owner's write serialised nothing")
	}
	s.Release()
	if c.enc != nil || c.cur != nil || c.out != nil {
		t.Fatal("released claims still hold the view or blocks")
	}
	v.Put(k(2), []byte("z")) // in place, without claims
	if got, _, _ := v.Get(k(2)); string(got) != "z" {
		t.Fatalf("k(2) = %q", got)
	}
}
