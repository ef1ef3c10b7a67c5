package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Tables of the Pebble backend. Values returned by Get are copied into a
// buffer of the backend, valid until its next call; values passed to an
// Iterate or Scan callback are valid during that callback only. Iterate and
// Scan see the table as it was when they started: writes fn makes (deleting
// an entry not reached yet, say) do not change what they visit.

func (t *pebbleTable) db() (pebbleRW, error) { return t.p.rw() }

// wdb is db for a write: the next snapshot must be a base, which holds the
// DB's contents (a delta holds only the value caches' changes).
func (t *pebbleTable) wdb() (pebbleRW, error) {
	t.p.dbWritten = true
	return t.p.rw()
}

// key builds prefix||k in the backend's key buffer; Pebble copies keys on
// write and does not keep them on read.
func (t *pebbleTable) key(k []byte) []byte {
	t.p.keyBuf = append(append(t.p.keyBuf[:0], t.prefix...), k...)
	return t.p.keyBuf
}

// mapKey builds prefix||escaped(k)||uk.
func (t *pebbleTable) mapKey(k, uk []byte) []byte {
	b := appendEscaped(append(t.p.keyBuf[:0], t.prefix...), k)
	t.p.keyBuf = append(b, uk...)
	return t.p.keyBuf
}

func (t *pebbleTable) wrap(op string, err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("state: pebble: %s %q: %w", op, t.name, err)
}

// get copies the value of key into the backend's buffer.
func (t *pebbleTable) get(key []byte) ([]byte, bool, error) {
	db, err := t.db()
	if err != nil {
		return nil, false, err
	}
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, t.wrap("get", err)
	}
	t.p.getBuf = append(t.p.getBuf[:0], v...)
	closer.Close()
	return t.p.getBuf, true, nil
}

func (t *pebbleTable) set(key, value []byte) error {
	db, err := t.wdb()
	if err != nil {
		return err
	}
	if err := db.Set(key, value, pebble.NoSync); err != nil {
		return t.wrap("put", err)
	}
	return nil
}

func (t *pebbleTable) del(key []byte) error {
	db, err := t.wdb()
	if err != nil {
		return err
	}
	if err := db.Delete(key, pebble.NoSync); err != nil {
		return t.wrap("delete", err)
	}
	return nil
}

// scan calls fn for each key in [lo, hi) with the key past skip bytes.
func (t *pebbleTable) scan(lo, hi []byte, skip int, fn func(k, v []byte) error) error {
	db, err := t.db()
	if err != nil {
		return err
	}
	// Bounds must stay put while the iterator lives: fn may reuse keyBuf.
	lo, hi = append([]byte(nil), lo...), append([]byte(nil), hi...)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return t.wrap("iterate", err)
	}
	// While the iterator reads a write window's batch, the window stays
	// open: fn's writes go to the batch, which the iterator does not see.
	t.p.iters++
	defer func() { t.p.iters-- }()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return t.wrap("iterate", err)
		}
		if err := fn(it.Key()[skip:], v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return t.wrap("iterate", err)
	}
	return nil
}

// ---- lists ----

// pebbleList stores a list as its items, each a uvarint length and the bytes
// (as memList does). Append writes one item as a merge operand; listMerger
// concatenates operands, so reading the key yields the whole list.
type pebbleList pebbleTable

func (l *pebbleList) t() *pebbleTable { return (*pebbleTable)(l) }

func (l *pebbleList) Append(key, value []byte) error {
	t := l.t()
	db, err := t.wdb()
	if err != nil {
		return err
	}
	// The operand goes after the key in the one buffer: one allocation-free
	// build, and Pebble copies both.
	k := t.key(key)
	n := len(k)
	buf := binary.AppendUvarint(k, uint64(len(value)))
	buf = append(buf, value...)
	t.p.keyBuf = buf
	if err := db.Merge(buf[:n:n], buf[n:], pebble.NoSync); err != nil {
		return t.wrap("append", err)
	}
	return nil
}

func (l *pebbleList) Iterate(key []byte, fn func(value []byte) error) error {
	t := l.t()
	db, err := t.db()
	if err != nil {
		return err
	}
	data, closer, err := db.Get(t.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return t.wrap("iterate", err)
	}
	defer closer.Close()
	// data may point into a write window's batch: keep it open while fn
	// runs (and maybe writes).
	t.p.iters++
	defer func() { t.p.iters-- }()
	if err := eachListItem(data, fn); errors.Is(err, errCorruptList) {
		return t.wrap("iterate", err)
	} else if err != nil {
		return err
	}
	return nil
}

func (l *pebbleList) Delete(key []byte) error { return l.t().del(l.t().key(key)) }

// listMerger concatenates list operands oldest first. Its name is stored in
// the DB: a DB written with it opens only with it.
var listMerger = &pebble.Merger{
	Name: "weir.list.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		return &listMerge{buf: append([]byte(nil), value...)}, nil
	},
}

// listMerge keeps the first operand and the newer ones in buf and the older
// ones aside (newest first), so that neither direction copies quadratically.
type listMerge struct {
	buf   []byte
	older [][]byte
}

func (m *listMerge) MergeNewer(value []byte) error {
	m.buf = append(m.buf, value...)
	return nil
}

func (m *listMerge) MergeOlder(value []byte) error {
	m.older = append(m.older, append([]byte(nil), value...))
	return nil
}

func (m *listMerge) Finish(includesBase bool) ([]byte, io.Closer, error) {
	if len(m.older) == 0 {
		return m.buf, nil, nil
	}
	n := len(m.buf)
	for _, o := range m.older {
		n += len(o)
	}
	out := make([]byte, 0, n)
	for i := len(m.older) - 1; i >= 0; i-- {
		out = append(out, m.older[i]...)
	}
	return append(out, m.buf...), nil, nil
}

// ---- maps ----

type pebbleMap pebbleTable

func (m *pebbleMap) t() *pebbleTable { return (*pebbleTable)(m) }

func (m *pebbleMap) Get(key, userKey []byte) ([]byte, bool, error) {
	return m.t().get(m.t().mapKey(key, userKey))
}

func (m *pebbleMap) Put(key, userKey, value []byte) error {
	return m.t().set(m.t().mapKey(key, userKey), value)
}

func (m *pebbleMap) Delete(key, userKey []byte) error {
	return m.t().del(m.t().mapKey(key, userKey))
}

func (m *pebbleMap) Iterate(key []byte, fn func(userKey, value []byte) error) error {
	t := m.t()
	lo := t.mapKey(key, nil)
	return t.scan(lo, prefixSuccessor(lo), len(lo), fn)
}

func (m *pebbleMap) Clear(key []byte) error {
	t := m.t()
	db, err := t.wdb()
	if err != nil {
		return err
	}
	lo := t.mapKey(key, nil)
	if err := db.DeleteRange(lo, prefixSuccessor(lo), pebble.NoSync); err != nil {
		return t.wrap("clear", err)
	}
	return nil
}

func (m *pebbleMap) Scan(fn func(key, userKey, value []byte) error) error {
	t := m.t()
	var kb []byte
	return t.scan(t.prefix, t.upper, len(t.prefix), func(k, v []byte) error {
		key, uk, err := cutEscaped(kb[:0], k)
		if err != nil {
			return t.wrap("scan", err)
		}
		kb = key
		return fn(key, uk, v)
	})
}

// ---- keys ----

// prefixSuccessor is the smallest key greater than every key with prefix b,
// or nil (no upper bound) if b is all 0xff.
func prefixSuccessor(b []byte) []byte {
	s := append([]byte(nil), b...)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}

// appendEscaped appends key so that the encoding is self-delimiting and
// order-preserving (see Pebble).
func appendEscaped(dst, key []byte) []byte {
	for {
		i := indexZero(key)
		if i < 0 {
			break
		}
		dst = append(dst, key[:i]...)
		dst = append(dst, 0x00, 0xff)
		key = key[i+1:]
	}
	dst = append(dst, key...)
	return append(dst, 0x00, 0x01)
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// cutEscaped decodes an escaped key at the start of b into dst and returns
// it and the rest of b.
func cutEscaped(dst, b []byte) (key, rest []byte, err error) {
	for {
		i := indexZero(b)
		if i < 0 || i+1 >= len(b) {
			return nil, nil, errors.New("state: pebble: bad map key encoding")
		}
		dst = append(dst, b[:i]...)
		switch b[i+1] {
		case 0x01:
			return dst, b[i+2:], nil
		case 0xff:
			dst = append(dst, 0)
			b = b[i+2:]
		default:
			return nil, nil, errors.New("state: pebble: bad map key escape")
		}
	}
}
