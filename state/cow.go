package state

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// The memory backend snapshots copy-on-write, the way Flink's
// CopyOnWriteStateMap does, so that Snapshot costs microseconds and not a copy
// of the state:
//
//   - Every piece of memory a table may share with a snapshot (a chunk of hash
//     slots, an out-of-line key/value buffer, a nested map) carries the version
//     of the clock at which it was allocated.
//   - Snapshot takes version v = cur, then cur++: everything allocated so far
//     has a version <= v and is frozen for that snapshot; the snapshot keeps
//     its own copies of the (small) chunk-pointer slices.
//   - A write to memory whose version is <= the highest version a live
//     snapshot holds copies it first and stamps the copy with cur. Memory with
//     a higher version is private to the live table and written in place.
//
// Release lowers maxLive, so once no snapshot is outstanding every write is in
// place again. Release may run on the upload goroutine: maxLive is atomic,
// which also orders the upload's last reads before the owner's next in-place
// write. A stale (higher) maxLive only costs a needless copy.
type clock struct {
	cur     uint32 // owner goroutine only
	maxLive atomic.Uint32

	mu   sync.Mutex
	live map[uint32]int // live snapshot versions (count of holders)
}

func newClock() *clock { return &clock{cur: 1, live: map[uint32]int{}} }

// shared reports whether memory allocated at version v may be read by a live
// snapshot.
func (c *clock) shared(v uint32) bool { return v <= c.maxLive.Load() }

// take freezes everything written so far and returns the snapshot's version.
func (c *clock) take() uint32 {
	v := c.cur
	c.cur++
	c.mu.Lock()
	c.live[v]++
	c.maxLive.Store(max(c.maxLive.Load(), v))
	c.mu.Unlock()
	return v
}

func (c *clock) release(v uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[v]--; c.live[v] <= 0 {
		delete(c.live, v)
	}
	var m uint32
	for lv := range c.live {
		m = max(m, lv)
	}
	c.maxLive.Store(m)
}

const (
	chunkBits  = 8
	chunkSlots = 1 << chunkBits
	chunkMask  = chunkSlots - 1
	// inlineCap is how many key+value bytes a slot holds without an extra
	// allocation: an 8-byte key with an 8-byte counter, or a 16-byte key with
	// one, fit; the slot is then one 64-byte cache line.
	inlineCap = 24
	occupied  = 1 << 31
	maxSlots  = 1 << 30
)

// slot is one entry of a valueMap: 64 bytes. Keys and values up to inlineCap
// bytes together live in buf; longer ones in ext (key then value).
type slot struct {
	hash uint32 // 0 if empty, else occupied | 31 bits of the key's hash
	ver  uint32 // version at which ext's backing array was allocated
	klen uint32
	vlen uint32
	buf  [inlineCap]byte
	ext  []byte // len == klen+vlen when not nil
}

func (s *slot) kv() []byte {
	if s.ext != nil {
		return s.ext
	}
	return s.buf[:s.klen+s.vlen]
}

func (s *slot) key() []byte   { return s.kv()[:s.klen] }
func (s *slot) value() []byte { return s.kv()[s.klen:] }

type chunk [chunkSlots]slot

// valueMap is an open-addressing (linear probing, backward-shift deletion)
// hash map from byte keys to byte values whose slots live in fixed-size chunks
// so that a snapshot shares them and a write copies one chunk, not the table.
type valueMap struct {
	clk    *clock
	seed   maphash.Seed
	chunks []*chunk
	vers   []uint32 // allocation version of each chunk
	mask   uint32
	count  int
	growAt int
}

func newValueMap(clk *clock, hint int) *valueMap {
	m := &valueMap{clk: clk, seed: maphash.MakeSeed()}
	n := chunkSlots
	for n*3/4 < hint && n < maxSlots {
		n *= 2
	}
	m.alloc(n)
	return m
}

func (m *valueMap) alloc(n int) {
	m.chunks = make([]*chunk, n/chunkSlots)
	m.vers = make([]uint32, len(m.chunks))
	for i := range m.chunks {
		m.chunks[i] = new(chunk)
		m.vers[i] = m.clk.cur
	}
	m.mask = uint32(n - 1)
	m.growAt = n / 4 * 3
}

func (m *valueMap) hash(key []byte) uint32 {
	return uint32(maphash.Bytes(m.seed, key)) | occupied
}

func (m *valueMap) at(i uint32) *slot { return &m.chunks[i>>chunkBits][i&chunkMask] }

// writable returns slot i for writing, copying its chunk first if a live
// snapshot may read it.
func (m *valueMap) writable(i uint32) *slot {
	ci := i >> chunkBits
	if m.clk.shared(m.vers[ci]) {
		c := new(chunk)
		*c = *m.chunks[ci]
		m.chunks[ci] = c
		m.vers[ci] = m.clk.cur
	}
	return &m.chunks[ci][i&chunkMask]
}

func (m *valueMap) find(key []byte, h uint32) (uint32, bool) {
	i := h & m.mask
	for {
		s := m.at(i)
		if s.hash == 0 {
			return i, false
		}
		if s.hash == h && bytes.Equal(s.key(), key) {
			return i, true
		}
		i = (i + 1) & m.mask
	}
}

func (m *valueMap) get(key []byte) ([]byte, bool) {
	i, ok := m.find(key, m.hash(key))
	if !ok {
		return nil, false
	}
	return m.at(i).value(), true
}

func (m *valueMap) put(key, val []byte) {
	h := m.hash(key)
	i, ok := m.find(key, h)
	if !ok {
		m.insert(i, h, key, val)
		return
	}
	s := m.writable(i)
	klen := int(s.klen)
	n := klen + len(val)
	switch {
	case n <= inlineCap:
		if s.ext != nil {
			copy(s.buf[:], s.ext[:klen])
			copy(s.buf[klen:], val)
			s.ext = nil
		} else {
			copy(s.buf[klen:], val)
		}
	case s.ext != nil && cap(s.ext) >= n && !m.clk.shared(s.ver):
		s.ext = s.ext[:n]
		copy(s.ext[klen:], val)
	default:
		e := make([]byte, n)
		copy(e, s.key())
		copy(e[klen:], val)
		s.ext = e
		s.ver = m.clk.cur
	}
	s.vlen = uint32(len(val))
}

// appendValue appends b to key's value (creating it if absent) without
// copying the value when its buffer has room. Writing past the end of a
// buffer a snapshot shares is safe: the snapshot's slot copy keeps its own
// length and never reads past it, and only the live slot appends. ver stays
// that of the (shared) buffer, so a later put still copies.
func (m *valueMap) appendValue(key, b []byte) {
	h := m.hash(key)
	i, ok := m.find(key, h)
	if !ok {
		m.insert(i, h, key, b)
		return
	}
	s := m.writable(i)
	old := int(s.klen + s.vlen)
	n := old + len(b)
	switch {
	case s.ext == nil && n <= inlineCap:
		copy(s.buf[old:], b)
	case s.ext != nil && cap(s.ext) >= n:
		s.ext = append(s.ext, b...)
	default:
		e := make([]byte, n, max(2*n, 64))
		copy(e, s.kv())
		copy(e[old:], b)
		s.ext = e
		s.ver = m.clk.cur
	}
	s.vlen += uint32(len(b))
}

func (m *valueMap) insert(i, h uint32, key, val []byte) {
	if m.count >= m.growAt {
		m.grow()
		i, _ = m.find(key, h)
	}
	s := m.writable(i)
	s.hash = h
	s.klen = uint32(len(key))
	s.vlen = uint32(len(val))
	if n := len(key) + len(val); n <= inlineCap {
		copy(s.buf[:], key)
		copy(s.buf[len(key):], val)
		s.ext = nil
	} else {
		e := make([]byte, n)
		copy(e, key)
		copy(e[len(key):], val)
		s.ext = e
		s.ver = m.clk.cur
	}
	m.count++
}

func (m *valueMap) delete(key []byte) {
	i, ok := m.find(key, m.hash(key))
	if !ok {
		return
	}
	// Backward-shift deletion: move later entries of the probe run into the
	// hole so that lookups never need tombstones.
	j := i
	for {
		j = (j + 1) & m.mask
		sj := m.at(j)
		if sj.hash == 0 {
			break
		}
		home := sj.hash & m.mask
		if (j-home)&m.mask >= (j-i)&m.mask {
			moved := *sj
			*m.writable(i) = moved
			i = j
		}
	}
	*m.writable(i) = slot{}
	m.count--
}

// grow doubles the table into fresh chunks; the old ones stay untouched for
// the snapshots that hold them. Slots keep their ext and its version.
func (m *valueMap) grow() {
	if int(m.mask)+1 >= maxSlots {
		panic("state: memory table exceeds 2^30 slots")
	}
	old := m.chunks
	m.alloc(2 * (int(m.mask) + 1))
	for _, c := range old {
		for k := range c {
			s := &c[k]
			if s.hash == 0 {
				continue
			}
			i := s.hash & m.mask
			for m.at(i).hash != 0 {
				i = (i + 1) & m.mask
			}
			*m.at(i) = *s
		}
	}
}

// clear empties the map in place (fresh chunks; snapshots keep the old ones).
func (m *valueMap) clear() {
	m.alloc(chunkSlots)
	m.count = 0
}

// valueView is a valueMap as it was when a snapshot was taken.
type valueView struct {
	chunks []*chunk
	count  int
}

func (m *valueMap) view() valueView {
	return valueView{chunks: append([]*chunk(nil), m.chunks...), count: m.count}
}

// each calls fn for every entry of the view, in slot order; fn must not keep
// the slices.
func (v valueView) each(fn func(key, val []byte) error) error {
	for _, c := range v.chunks {
		for k := range c {
			s := &c[k]
			if s.hash == 0 {
				continue
			}
			if err := fn(s.key(), s.value()); err != nil {
				return err
			}
		}
	}
	return nil
}

// each walks the live map the same way.
func (m *valueMap) each(fn func(key, val []byte) error) error {
	return valueView{chunks: m.chunks, count: m.count}.each(fn)
}

// slab is a copy-on-write array of object pointers with free-index reuse; a
// map table keeps its nested maps in one and their indexes in a valueMap.
type slab[T any] struct {
	clk    *clock
	chunks []*[chunkSlots]*T
	vers   []uint32
	free   []uint32
	next   uint32
}

func (s *slab[T]) get(i uint32) *T { return s.chunks[i>>chunkBits][i&chunkMask] }

func (s *slab[T]) set(i uint32, p *T) {
	ci := i >> chunkBits
	if s.clk.shared(s.vers[ci]) {
		c := *s.chunks[ci]
		s.chunks[ci] = &c
		s.vers[ci] = s.clk.cur
	}
	s.chunks[ci][i&chunkMask] = p
}

func (s *slab[T]) add(p *T) uint32 {
	var i uint32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		i = s.next
		s.next++
		if int(i>>chunkBits) == len(s.chunks) {
			s.chunks = append(s.chunks, new([chunkSlots]*T))
			s.vers = append(s.vers, s.clk.cur)
		}
	}
	s.set(i, p)
	return i
}

func (s *slab[T]) remove(i uint32) {
	s.set(i, nil)
	s.free = append(s.free, i)
}

func (s *slab[T]) view() []*[chunkSlots]*T { return append([]*[chunkSlots]*T(nil), s.chunks...) }

func slabGet[T any](chunks []*[chunkSlots]*T, i uint32) *T { return chunks[i>>chunkBits][i&chunkMask] }
