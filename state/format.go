package state

import (
	"bufio"
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
//	count records: uvarint length, key, uvarint length, record
//
// A value's record is the value; a list's is its items, each a uvarint length
// and the bytes; a map's is a uvarint entry count, then per entry in user-key
// order a uvarint length, the user key, a uvarint length, the value. Integrity
// is the FileRef's size and SHA-256, checked before decoding.
const (
	fileMagic     = "WEIRMEM"
	formatVersion = 1
)

type objectWriter struct {
	*bufio.Writer
	tmp [binary.MaxVarintLen64]byte
}

func (w *objectWriter) uvarint(v uint64) {
	w.Write(w.tmp[:binary.PutUvarint(w.tmp[:], v)])
}

func (w *objectWriter) bytes(b []byte) {
	w.uvarint(uint64(len(b)))
	w.Write(b)
}

// record writes uvarint(len(key)) key uvarint(len(rec)) rec with one Write
// into the buffer when it fits: four small Writes per entry were a tenth of
// what a checkpoint of a million keys cost the task's core.
func (w *objectWriter) record(key, rec []byte) {
	n := len(key) + len(rec) + 2*binary.MaxVarintLen64
	if w.Available() < n && n <= w.Size() {
		w.Flush() // an error sticks; Flush at the end reports it
	}
	if w.Available() < n {
		w.bytes(key)
		w.bytes(rec)
		return
	}
	b := w.AvailableBuffer()
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(rec)))
	b = append(b, rec...)
	w.Write(b)
}

func writeTable(w *objectWriter, name string, kind tableKind, v tableView) error {
	w.WriteString(fileMagic)
	w.WriteByte(formatVersion)
	w.WriteByte(byte(kind))
	w.bytes([]byte(name))
	w.uvarint(uint64(v.count()))
	return v.each(func(key, rec []byte) error {
		w.record(key, rec)
		return nil // bufio keeps the first write error; Flush reports it
	})
}

// putObject writes an object through write, streaming the bytes into
// checkpoint.PutFile (which counts and hashes them) through a pipe, so that a
// large table is never buffered whole on the way to the storage.
func putObject(ctx context.Context, st checkpoint.Storage, name string, write func(w *objectWriter) error) (checkpoint.FileRef, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		w := &objectWriter{Writer: bufio.NewWriterSize(pw, 64<<10)}
		err := write(w)
		if err == nil {
			err = w.Flush()
		}
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- err
	}()
	ref, err := checkpoint.PutFile(ctx, st, name, pr)
	// If the storage stopped reading early, unblock the writer.
	pr.CloseWithError(errors.New("storage stopped reading"))
	werr := <-done
	if err != nil {
		return checkpoint.FileRef{}, err
	}
	if werr != nil {
		return checkpoint.FileRef{}, werr
	}
	return ref, nil
}

// readVerified reads a whole object and checks its size and SHA-256 against
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

func (d *decoder) bytes() []byte {
	n := d.uvarint()
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
	if v := data[len(fileMagic)]; v != formatVersion {
		return nil, fmt.Errorf("memory state format version %d, this build reads %d", v, formatVersion)
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
		key, rec := d.bytes(), d.bytes()
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
