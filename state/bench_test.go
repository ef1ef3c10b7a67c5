package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

const benchKeys = 1 << 20

func benchKeysPerm() [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, benchKeys)
	for i, p := range r.Perm(benchKeys) {
		keys[i] = binary.BigEndian.AppendUint64(nil, uint64(p)*0x9E3779B97F4A7C15)
	}
	return keys
}

func filled(b *testing.B, keys [][]byte) (*Memory, ValueTable) {
	m := OpenMemory(MemoryOptions{})
	v := mustValue(b, m, "count")
	var val [8]byte
	for _, k := range keys {
		v.Put(k, val[:])
	}
	return m, v
}

// BenchmarkValuePut1M is a keyed count's state access: Get then Put of an
// 8-byte value on an 8-byte key, random keys out of 1M.
func BenchmarkValuePut1M(b *testing.B) {
	keys := benchKeysPerm()
	_, v := filled(b, keys)
	var buf [8]byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := keys[(i*7919)&(benchKeys-1)]
		old, _, _ := v.Get(k)
		binary.BigEndian.PutUint64(buf[:], binary.BigEndian.Uint64(old)+1)
		v.Put(k, buf[:])
	}
}

// BenchmarkValueHandle1M is the same through the typed handle.
func BenchmarkValueHandle1M(b *testing.B) {
	keys := benchKeysPerm()
	m, _ := filled(b, keys)
	scope := &KeyScope{}
	v, _ := NewValue(m, scope, "count", Int64())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		scope.Set(keys[(i*7919)&(benchKeys-1)])
		n, _, _ := v.Get()
		v.Set(n + 1)
	}
}

// BenchmarkSnapshot1M is the synchronous part of a checkpoint at 1M keys: the
// pause of processing at a barrier.
func BenchmarkSnapshot1M(b *testing.B) {
	keys := benchKeysPerm()
	m, _ := filled(b, keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s, err := m.Snapshot(checkpoint.ID(i))
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

type discardStorage struct{ fakeStorage }

func (*discardStorage) Put(ctx context.Context, name string, r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// BenchmarkValuePut1MCheckpointed is BenchmarkValuePut1M with a checkpoint
// every 5M operations (a second at 5M records/s): Snapshot inline, Upload on
// another goroutine as the runtime does. Compare its ns/op with
// BenchmarkValuePut1M's for the cost of checkpointing.
func BenchmarkValuePut1MCheckpointed(b *testing.B) {
	keys := benchKeysPerm()
	m, v := filled(b, keys)
	var buf [8]byte
	done := make(chan error, 1)
	inflight := false
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%5_000_000 == 4_999_999 {
			if inflight {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			s, err := m.Snapshot(checkpoint.ID(i))
			if err != nil {
				b.Fatal(err)
			}
			inflight = true
			go func() {
				defer s.Release()
				_, err := s.Upload(context.Background(), &discardStorage{}, "chk/", "shared/")
				done <- err
			}()
		}
		k := keys[(i*7919)&(benchKeys-1)]
		old, _, _ := v.Get(k)
		binary.BigEndian.PutUint64(buf[:], binary.BigEndian.Uint64(old)+1)
		v.Put(k, buf[:])
	}
	if inflight {
		<-done
	}
}

// BenchmarkUpload1M is the asynchronous part of a checkpoint at 1M keys:
// serialising the snapshot (to a storage that discards it, hashing included).
func BenchmarkUpload1M(b *testing.B) {
	keys := benchKeysPerm()
	m, _ := filled(b, keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s, _ := m.Snapshot(checkpoint.ID(i))
		if _, err := s.Upload(context.Background(), &discardStorage{}, "chk/", "shared/"); err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

// BenchmarkPebbleValues is the count job's state access on the Pebble
// backend: per record, Get and Set of each of its value tables (a count and
// a sum, or one table only) through typed handles, for keys out of 2,500
// (a task's share of the bench's 10,000 keys over 4 partitions), all in the
// value cache.
//
//	go test ./state -run '^$' -bench PebbleValues -count 6
func BenchmarkPebbleValues(b *testing.B) {
	for _, tables := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("tables=%d", tables), func(b *testing.B) {
			p := openTestPebble(b, PebbleOptions{})
			scope := &KeyScope{}
			vs := make([]*Value[int64], tables)
			for i := range vs {
				v, err := NewValue(p, scope, fmt.Sprintf("v%d", i), Int64())
				if err != nil {
					b.Fatal(err)
				}
				vs[i] = v
			}
			const nkeys = 2500
			keys := make([][]byte, nkeys)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "k%d", i*7919%10000)
			}
			r := rand.New(rand.NewPCG(1, 2))
			order := make([]int, 1<<16)
			for i := range order {
				order[i] = r.IntN(nkeys)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				scope.Set(keys[order[i&(len(order)-1)]])
				for _, v := range vs {
					n, _, err := v.Get()
					if err != nil {
						b.Fatal(err)
					}
					if err := v.Set(n + 1); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
