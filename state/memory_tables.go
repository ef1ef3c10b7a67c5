package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/checkpoint"
)

type tableKind byte

const (
	kindValue tableKind = 1
	kindList  tableKind = 2
	kindMap   tableKind = 3
)

func (k tableKind) String() string {
	switch k {
	case kindValue:
		return "value"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// memTable is what the Memory backend needs of each of its tables.
type memTable interface {
	kind() tableKind
	// view captures the table for a snapshot; it must be cheap.
	view() tableView
	// reset empties the table.
	reset()
	// index is the hash map every access to the table looks a key up in
	// first (see Memory.Prefetch).
	index() *valueMap
}

// tableView is a table frozen at a snapshot; its methods run on the upload
// goroutine, concurrently with writes to the live table.
type tableView interface {
	count() int
	// chunks is the number of chunks of the view's index.
	chunks() int
	// appendChunk appends the records of the keys in chunk i (see format.go):
	// for values the value, for lists the encoded list, for maps an encoded
	// sequence of entries.
	appendChunk(b []byte, i int) []byte
}

// ---- values ----

type memValue struct {
	name string
	m    *valueMap
}

func (t *memValue) kind() tableKind  { return kindValue }
func (t *memValue) view() tableView  { return valueTableView{t.m.view()} }
func (t *memValue) reset()           { t.m.clear() }
func (t *memValue) index() *valueMap { return t.m }

func (t *memValue) Get(key []byte) ([]byte, bool, error) {
	v, ok := t.m.get(key)
	return v, ok, nil
}

func (t *memValue) Put(key, value []byte) error {
	t.m.put(key, value)
	return nil
}

func (t *memValue) Delete(key []byte) error {
	t.m.delete(key)
	return nil
}

type valueTableView struct{ v valueView }

func (v valueTableView) count() int                         { return v.v.count }
func (v valueTableView) chunks() int                        { return len(v.v.chunks) }
func (v valueTableView) appendChunk(b []byte, i int) []byte { return v.v.appendChunk(b, i) }

// ---- lists ----

// memList keeps each list as one buffer of uvarint-length-prefixed items in a
// valueMap, so that Append appends to the buffer (amortised, no copy of the
// list) and a snapshot shares it (see valueMap.appendValue).
type memList struct {
	name    string
	m       *valueMap
	scratch []byte
}

func (t *memList) kind() tableKind  { return kindList }
func (t *memList) view() tableView  { return valueTableView{t.m.view()} }
func (t *memList) reset()           { t.m.clear() }
func (t *memList) index() *valueMap { return t.m }

func (t *memList) Append(key, value []byte) error {
	t.scratch = binary.AppendUvarint(t.scratch[:0], uint64(len(value)))
	t.scratch = append(t.scratch, value...)
	t.m.appendValue(key, t.scratch)
	return nil
}

func (t *memList) Iterate(key []byte, fn func(value []byte) error) error {
	data, ok := t.m.get(key)
	if !ok {
		return nil
	}
	return eachListItem(data, fn)
}

func (t *memList) Delete(key []byte) error {
	t.m.delete(key)
	return nil
}

var errCorruptList = errors.New("corrupt list encoding")

func eachListItem(data []byte, fn func(value []byte) error) error {
	for len(data) > 0 {
		n, w := binary.Uvarint(data)
		if w <= 0 || n > uint64(len(data)-w) {
			return errCorruptList
		}
		data = data[w:]
		if err := fn(data[:n:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// ---- maps ----

// nested is one key's map. It is immutable once a snapshot may share it
// (ver <= maxLive): the first write after that copies it.
type nested struct {
	ver uint32
	// m maps a user key to userKey||value (one allocation per entry; the user
	// key's length is len of the map key).
	m map[string][]byte
	// sorted caches m's keys in order; nil after a change. Only the owner
	// goroutine reads or writes it (uploads sort on their own).
	sorted []string
}

func (n *nested) keys() []string {
	if n.sorted == nil {
		n.sorted = sortedKeys(n.m)
	}
	return n.sorted
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// memMap keeps, per key, the index of its nested map in a slab; the index
// lives in a valueMap as 4 little-endian bytes.
type memMap struct {
	name string
	clk  *clock
	idx  *valueMap
	objs *slab[nested]
	buf  [4]byte
}

func newMemMap(name string, clk *clock, hint int) *memMap {
	return &memMap{name: name, clk: clk, idx: newValueMap(clk, hint), objs: &slab[nested]{clk: clk}}
}

func (t *memMap) kind() tableKind  { return kindMap }
func (t *memMap) index() *valueMap { return t.idx }

func (t *memMap) reset() {
	t.idx = newValueMap(t.clk, 0)
	t.objs = &slab[nested]{clk: t.clk}
}

func (t *memMap) lookup(key []byte) (uint32, *nested) {
	b, ok := t.idx.get(key)
	if !ok {
		return 0, nil
	}
	i := binary.LittleEndian.Uint32(b)
	return i, t.objs.get(i)
}

func (t *memMap) Get(key, userKey []byte) ([]byte, bool, error) {
	_, n := t.lookup(key)
	if n == nil {
		return nil, false, nil
	}
	e, ok := n.m[string(userKey)]
	if !ok {
		return nil, false, nil
	}
	return e[len(userKey):], true, nil
}

// writable returns key's nested map for writing, creating or copying it.
func (t *memMap) writable(key []byte, create bool) *nested {
	i, n := t.lookup(key)
	switch {
	case n == nil && !create:
		return nil
	case n == nil:
		n = &nested{ver: t.clk.cur, m: map[string][]byte{}}
		binary.LittleEndian.PutUint32(t.buf[:], t.objs.add(n))
		t.idx.put(key, t.buf[:])
	case t.clk.shared(n.ver):
		c := &nested{ver: t.clk.cur, m: make(map[string][]byte, len(n.m)), sorted: n.sorted}
		for k, v := range n.m {
			c.m[k] = v // entries are never written in place
		}
		t.objs.set(i, c)
		n = c
	}
	return n
}

func (t *memMap) Put(key, userKey, value []byte) error {
	n := t.writable(key, true)
	e := make([]byte, len(userKey)+len(value))
	copy(e, userKey)
	copy(e[len(userKey):], value)
	if _, ok := n.m[string(userKey)]; !ok {
		n.sorted = nil
	}
	n.m[string(userKey)] = e
	return nil
}

func (t *memMap) Delete(key, userKey []byte) error {
	n := t.writable(key, false)
	if n == nil {
		return nil
	}
	if _, ok := n.m[string(userKey)]; !ok {
		return nil
	}
	delete(n.m, string(userKey))
	n.sorted = nil
	if len(n.m) == 0 {
		return t.Clear(key)
	}
	return nil
}

func (t *memMap) Clear(key []byte) error {
	i, n := t.lookup(key)
	if n == nil {
		return nil
	}
	t.objs.remove(i)
	t.idx.delete(key)
	return nil
}

func (t *memMap) Iterate(key []byte, fn func(userKey, value []byte) error) error {
	_, n := t.lookup(key)
	if n == nil {
		return nil
	}
	for _, k := range n.keys() {
		e, ok := n.m[k] // fn may have deleted it
		if !ok {
			continue
		}
		if err := fn(e[:len(k):len(k)], e[len(k):]); err != nil {
			return err
		}
	}
	return nil
}

func (t *memMap) Scan(fn func(key, userKey, value []byte) error) error {
	var keys [][]byte
	err := t.idx.each(func(key, _ []byte) error {
		keys = append(keys, bytes.Clone(key))
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(keys, bytes.Compare)
	for _, key := range keys {
		err := t.Iterate(key, func(uk, v []byte) error { return fn(key, uk, v) })
		if err != nil {
			return err
		}
	}
	return nil
}

type mapTableView struct {
	idx  valueView
	objs []*[chunkSlots]*nested
}

func (t *memMap) view() tableView {
	return &mapTableView{idx: t.idx.view(), objs: t.objs.view()}
}

func (v *mapTableView) count() int { return v.idx.count }

func (v *mapTableView) chunks() int { return len(v.idx.chunks) }

// appendChunk encodes each key's map as uvarint count, then per entry in
// user-key order uvarint len, user key, uvarint len, value. It writes no
// shared scratch: the owner and the upload may run it at once (see
// chunkClaims).
func (v *mapTableView) appendChunk(b []byte, i int) []byte {
	c := v.idx.chunks[i]
	for k := range c {
		s := &c[k]
		if s.hash == 0 {
			continue
		}
		key, ib := s.kv(v.idx.exts)
		n := slabGet(v.objs, binary.LittleEndian.Uint32(ib))
		ks := sortedKeys(n.m)
		size := uvarintLen(len(ks))
		for _, k := range ks {
			vl := len(n.m[k]) - len(k)
			size += uvarintLen(len(k)) + len(k) + uvarintLen(vl) + vl
		}
		b = binary.AppendUvarint(b, uint64(len(key)))
		b = binary.AppendUvarint(b, uint64(size))
		b = append(b, key...)
		b = binary.AppendUvarint(b, uint64(len(ks)))
		for _, k := range ks {
			e := n.m[k]
			b = appendRecordPart(appendRecordPart(b, e[:len(k)]), e[len(k):])
		}
	}
	return b
}

func uvarintLen(n int) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], uint64(n))
}

// validName rejects table names that cannot be one object name segment.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || !checkpoint.PrintableName(name) {
		return fmt.Errorf("state: invalid state name %q: want a non-empty name without slashes or control characters, in UTF-8", name)
	}
	return nil
}
