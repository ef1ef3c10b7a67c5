package sink

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// AppendEncoder returns an Encoder that builds each record from buffers the
// sink reuses: enc appends v's key to key and its value to value and
// returns them. Once the record is written (its produce promise ran), the
// sink takes the record and its buffers back for a later one, so that a
// write allocates neither: an Encoder that returns a new *kgo.Record and
// new bytes makes two allocations a record, which at a million records a
// second is much of what the collector has to do.
//
// Return nil for a null key (no key: the record is spread over partitions)
// or a null value (a tombstone); an appended slice, even empty, is written
// as it is. enc may not keep the buffers it is given or returns; it may
// return slices of its own instead, which are written but not reused. A
// franz-go hook in Config.ClientOpts that keeps a record past its produce
// promise sees it reused.
func AppendEncoder[T any](enc func(key, value []byte, v T) ([]byte, []byte, error)) Encoder[T] {
	return func(v T) (*kgo.Record, error) {
		p := recordPool.Get().(*pooledRecord)
		k, val, err := enc(p.key[:0], p.value[:0], v)
		if err != nil {
			recordPool.Put(p)
			return nil, err
		}
		p.key, p.value = reusable(p.key, k), reusable(p.value, val)
		p.rec = kgo.Record{Key: k, Value: val, Context: p}
		return &p.rec, nil
	}
}

// maxPooledBytes bounds a buffer the pool keeps: a rare large record does
// not pin its size for every record after it.
const maxPooledBytes = 64 << 10

// pooledRecord is a record AppendEncoder made, with its buffers. It is the
// record's Context (franz-go reads only its Done, nil as Background's), by
// which the sink, given the record back in its promise, finds it. Its
// first buffers are inside it: one object, whose lines the encoder and
// franz-go touch together, where a record in flight is out of the caches
// by the time its buffers are used again.
type pooledRecord struct {
	context.Context
	rec        kgo.Record
	key, value []byte
	keyBuf     [32]byte
	valueBuf   [64]byte
}

var recordPool = sync.Pool{New: func() any {
	p := &pooledRecord{Context: context.Background()}
	p.key, p.value = p.keyBuf[:0], p.valueBuf[:0]
	return p
}}

// reusable is the buffer to give enc next time, after it returned got
// for buf: got itself if it is buf appended in place; else a new buffer
// with room for got if got outgrew buf (got may be enc's own bytes, which
// must never be appended to); else buf.
func reusable(buf, got []byte) []byte {
	switch {
	case cap(got) == 0:
		return buf
	case cap(buf) > 0 && &buf[:1][0] == &got[:1][0]:
		return got
	case cap(got) > cap(buf) && cap(got) <= maxPooledBytes:
		return make([]byte, 0, cap(got))
	}
	return buf
}

// recycle takes back r, if AppendEncoder made it, for a later record. The
// caller is its promise: franz-go no longer reads r, and nothing else may.
func recycle(r *kgo.Record) {
	p, ok := r.Context.(*pooledRecord)
	if !ok || &p.rec != r {
		return
	}
	p.rec = kgo.Record{}
	if cap(p.key) > maxPooledBytes || cap(p.value) > maxPooledBytes {
		return // let it go: the next New starts small
	}
	recordPool.Put(p)
}
