package state

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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
	const keySpace = 4000 // 8192 slots, which grow at 6144 keys: never here
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 0))
	b := OpenMemory(MemoryOptions{ExpectedKeys: keySpace})
	v, mp := mustValue(t, b, "v"), mustMap(t, b, "m")
	key := func() []byte { return fmt.Appendf(nil, "k%d", r.IntN(keySpace)) }
	val := func() []byte { return bytes.Repeat([]byte{'a' + byte(r.IntN(26))}, r.IntN(40)) }
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
	for range 8000 {
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
			if i%3 != 0 {
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
	buf := make([]byte, 1<<10)
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
			for range 5 {
				write()
			}
		}
	}
	got := newModel()
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
		t.Logf("%s: %d chunks serialised by the owner, %d by the upload, %d copied", name, owner, uploaded, copied[name])
		if owner == 0 || uploaded == 0 || copied[name] == 0 {
			t.Fatalf("%s: a path was not taken: owner %d, upload %d, copied %d", name, owner, uploaded, copied[name])
		}
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
	if !got.equal(want) {
		t.Fatalf("uploaded state differs from the state at the snapshot\n got %v\nwant %v", got, want)
	}
	if d := dump(t, b); !d.equal(live) {
		t.Fatalf("live state differs from the writes made\n got %v\nwant %v", d, live)
	}
}
