package state

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/weirstream/weir/checkpoint"
)

// A memory snapshot file holds one table:
//
//	magic    "WEIRMEM" (7 bytes)
//	version  1 byte (formatVersion)
//	kind     1 byte (1 value, 2 list, 3 map)
//	name     uvarint length, bytes (the state name)
//	count    uvarint (number of keys)
//	count records: uvarint key length, uvarint record length, key, record
//
// A value's record is the value; a list's is its items, each a uvarint length
// and the bytes; a map's is a uvarint entry count, then per entry in user-key
// order a uvarint length, the user key, a uvarint length, the value. Integrity
// is the FileRef's size and checksum, checked before decoding.
//
// Version 1 wrote a record as uvarint length, key, uvarint length, record;
// version 2 puts both lengths first, so that a slot whose key and value sit
// side by side (see slot) is written with one copy. Both are read.
const (
	fileMagic     = "WEIRMEM"
	formatVersion = 2
)

// tableReader reads a table's snapshot file: each Read serialises the next
// chunks of the view into a small buffer and copies from it, so that the
// bytes go from the table to the storage, which hashes them as it reads, with
// no pipe and no goroutine in between. With claims, chunks the owner has
// serialised come from its blocks instead (see chunkClaims).
type tableReader struct {
	v      tableView
	claims *chunkClaims
	next   int    // next chunk to serialise
	buf    []byte // buf[off:] is serialised and not read yet
	off    int
	done   bool
}

func newTableReader(name string, kind tableKind, v tableView, claims *chunkClaims) *tableReader {
	b := make([]byte, 0, 16<<10)
	b = append(b, fileMagic...)
	b = append(b, formatVersion, byte(kind))
	b = appendRecordPart(b, []byte(name))
	b = binary.AppendUvarint(b, uint64(v.count()))
	return &tableReader{v: v, claims: claims, buf: b}
}

func (r *tableReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.off == len(r.buf) && !r.refill() {
			break
		}
		c := copy(p[n:], r.buf[r.off:])
		n += c
		r.off += c
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// refill puts the next records in buf; false at the end of the table.
func (r *tableReader) refill() bool {
	r.off = 0
	for !r.done {
		if r.claims != nil {
			if b := r.claims.block(false); b != nil {
				r.buf = b
				return true
			}
		}
		if r.next == r.v.chunks() {
			r.done = true
			break
		}
		i := r.next
		r.next++
		if r.claims == nil {
			r.buf = r.v.appendChunk(r.buf[:0], i)
		} else if r.claims.uploadTakes(i) {
			r.buf = r.v.appendChunk(r.buf[:0], i)
			r.claims.uploaded(i)
		} else {
			continue
		}
		if len(r.buf) > 0 {
			return true
		}
	}
	if r.claims != nil {
		if b := r.claims.block(true); len(b) > 0 {
			r.buf = b
			return true
		}
	}
	r.buf = r.buf[:0]
	return false
}

// appendRecordPart appends uvarint(len(b)) and b.
func appendRecordPart(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendRecord appends one record: uvarint(len(key)) uvarint(len(rec)) key
// rec.
func appendRecord(dst, key, rec []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = binary.AppendUvarint(dst, uint64(len(rec)))
	return append(append(dst, key...), rec...)
}

// readVerified reads a whole object and checks its size and checksum against
// f; a mismatch wraps checkpoint.ErrCorrupt and names the object.
func readVerified(ctx context.Context, st checkpoint.Storage, f checkpoint.FileRef) ([]byte, error) {
	data, err := checkpoint.ReadVerified(ctx, st, f)
	if err != nil && !strings.Contains(err.Error(), f.Name) {
		err = fmt.Errorf("read %s: %w", f.Name, err)
	}
	return data, err
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated or bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte { return d.take(d.uvarint()) }

// take returns the next n bytes.
func (d *decoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("length %d past the end (%d bytes left)", n, len(d.b))
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// decodeTable decodes a file into a fresh table named name.
func (m *Memory) decodeTable(name string, data []byte) (memTable, error) {
	if len(data) < len(fileMagic)+2 || string(data[:len(fileMagic)]) != fileMagic {
		return nil, errors.New("not a memory state file (bad magic)")
	}
	version := data[len(fileMagic)]
	if version != 1 && version != formatVersion {
		return nil, fmt.Errorf("memory state format version %d, this build reads 1 and %d", version, formatVersion)
	}
	kind := tableKind(data[len(fileMagic)+1])
	if kind < kindValue || kind > kindMap {
		return nil, fmt.Errorf("unknown state kind %d", kind)
	}
	d := &decoder{b: data[len(fileMagic)+2:]}
	if got := string(d.bytes()); d.err == nil && got != name {
		return nil, fmt.Errorf("file holds state %q, want %q", got, name)
	}
	count := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if count > uint64(len(d.b)) { // every record takes at least 2 bytes
		return nil, fmt.Errorf("key count %d exceeds the file", count)
	}
	t := m.newTable(name, kind, int(count))
	for i := uint64(0); i < count && d.err == nil; i++ {
		var key, rec []byte
		if version == 1 {
			key, rec = d.bytes(), d.bytes()
		} else {
			kl, rl := d.uvarint(), d.uvarint()
			key, rec = d.take(kl), d.take(rl)
		}
		if d.err != nil {
			break
		}
		switch t := t.(type) {
		case *memValue:
			t.m.put(key, rec)
		case *memList:
			if err := eachListItem(rec, func([]byte) error { return nil }); err != nil {
				return nil, fmt.Errorf("record %d: %w", i, err)
			}
			t.m.put(key, rec)
		case *memMap:
			if err := decodeNested(t, key, rec); err != nil {
				return nil, fmt.Errorf("record %d: %w", i, err)
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last record", len(d.b))
	}
	return t, nil
}

func decodeNested(t *memMap, key, rec []byte) error {
	d := &decoder{b: rec}
	n := d.uvarint()
	var prev []byte
	for i := uint64(0); i < n && d.err == nil; i++ {
		uk, v := d.bytes(), d.bytes()
		if d.err != nil {
			break
		}
		if i > 0 && bytes.Compare(prev, uk) >= 0 {
			return errors.New("map entries out of order")
		}
		prev = uk
		t.Put(key, uk, v)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return errors.New("trailing bytes in map record")
	}
	return nil
}
