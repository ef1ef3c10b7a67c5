package state

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
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
//     (A chunk of hash slots is usually serialised for the upload instead of
//     copied: see chunkClaims.)
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

// take freezes everything written so far and returns the snapshot's version;
// alone reports that no other snapshot is live.
func (c *clock) take() (v uint32, alone bool) {
	v = c.cur
	c.cur++
	c.mu.Lock()
	c.live[v]++
	alone = len(c.live) == 1 && c.live[v] == 1
	c.maxLive.Store(max(c.maxLive.Load(), v))
	c.mu.Unlock()
	return v, alone
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
	// buffer: an 8-byte key with an 8-byte counter, or a 16-byte key with
	// one, fit; the slot is then 32 bytes, two to a cache line.
	inlineCap = 24
	occupied  = 1 << 31
	maxSlots  = 1 << 30

	slotExt = 1 // flags: the key and value live in an ext buffer
)

// slot is one entry of a valueMap: 32 bytes and pointer-free, so that the
// chunks are noscan memory the GC never walks. Keys and values up to
// inlineCap bytes together live in buf (klen, vlen their lengths). Longer ones
// live in an out-of-line buffer of the map's extSlab (key then value); buf
// then holds the buffer's index and the key and value lengths, 4
// little-endian bytes each (see extIdx, extKlen, extVlen). The lengths are in
// the slot, not the buffer, so that a snapshot's copy of the slot keeps its
// own lengths while the live table appends to a shared buffer.
type slot struct {
	hash  uint32 // 0 if empty, else occupied | 31 bits of the key's hash
	klen  uint8  // inline only
	vlen  uint8  // inline only
	flags uint8
	_     uint8
	buf   [inlineCap]byte
}

func (s *slot) ext() bool { return s.flags&slotExt != 0 }

func (s *slot) extIdx() uint32  { return binary.LittleEndian.Uint32(s.buf[0:4]) }
func (s *slot) extKlen() uint32 { return binary.LittleEndian.Uint32(s.buf[4:8]) }
func (s *slot) extVlen() uint32 { return binary.LittleEndian.Uint32(s.buf[8:12]) }

func (s *slot) setExt(idx uint32, klen, vlen int) {
	s.flags = slotExt
	s.klen, s.vlen = 0, 0
	binary.LittleEndian.PutUint32(s.buf[0:4], idx)
	binary.LittleEndian.PutUint32(s.buf[4:8], uint32(klen))
	binary.LittleEndian.PutUint32(s.buf[8:12], uint32(vlen))
}

func (s *slot) setExtVlen(vlen int) { binary.LittleEndian.PutUint32(s.buf[8:12], uint32(vlen)) }

// lens returns the key and value lengths.
func (s *slot) lens() (int, int) {
	if s.ext() {
		return int(s.extKlen()), int(s.extVlen())
	}
	return int(s.klen), int(s.vlen)
}

// kv returns the slot's key and value; exts are the ext chunks of the map or
// view the slot belongs to.
func (s *slot) kv(exts []*extChunk) (key, val []byte) {
	if s.ext() {
		kl, vl := int(s.extKlen()), int(s.extVlen())
		b := extGet(exts, s.extIdx()).b
		return b[:kl:kl], b[kl : kl+vl : kl+vl]
	}
	kl, n := int(s.klen), int(s.klen)+int(s.vlen)
	return s.buf[:kl:kl], s.buf[kl:n:n]
}

type chunk [chunkSlots]slot

// extBuf is an out-of-line key+value buffer; len(b) == cap(b), the slot
// holding its index knows how much of it is used. ver is the version at which
// b was allocated: b is written in place only while no live snapshot may read
// it (appends past the used length excepted, see appendValue).
type extBuf struct {
	b   []byte
	ver uint32
}

type extChunk [chunkSlots]extBuf

func extGet(chunks []*extChunk, i uint32) *extBuf { return &chunks[i>>chunkBits][i&chunkMask] }

// extSlab is a copy-on-write array of extBufs with free-index reuse: the
// chunk slice is what a snapshot copies, and a change to an entry of a chunk a
// live snapshot may read copies the chunk first (as slab does).
type extSlab struct {
	chunks []*extChunk
	vers   []uint32
	free   []uint32
	next   uint32
}

func (x *extSlab) get(i uint32) *extBuf { return extGet(x.chunks, i) }

func (x *extSlab) set(clk *clock, i uint32, e extBuf) {
	ci := i >> chunkBits
	if clk.shared(x.vers[ci]) {
		c := *x.chunks[ci]
		x.chunks[ci] = &c
		x.vers[ci] = clk.cur
	}
	x.chunks[ci][i&chunkMask] = e
}

func (x *extSlab) add(clk *clock, e extBuf) uint32 {
	var i uint32
	if n := len(x.free); n > 0 {
		i = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		i = x.next
		x.next++
		if int(i>>chunkBits) == len(x.chunks) {
			x.chunks = append(x.chunks, new(extChunk))
			x.vers = append(x.vers, clk.cur)
		}
	}
	x.set(clk, i, e)
	return i
}

func (x *extSlab) remove(clk *clock, i uint32) {
	x.set(clk, i, extBuf{})
	x.free = append(x.free, i)
}

// valueMap is an open-addressing (linear probing, backward-shift deletion)
// hash map from byte keys to byte values whose slots live in fixed-size chunks
// so that a snapshot shares them and a write copies one chunk, not the table.
type valueMap struct {
	clk    *clock
	seed   maphash.Seed
	chunks []*chunk
	vers   []uint32 // allocation version of each chunk
	exts   extSlab
	mask   uint32
	count  int
	growAt int
	// used is set by every lookup and cleared by Memory.Prefetch, which
	// touches only the tables used since its last call.
	used bool
	// claims is set while the snapshot that took the chunks is the only
	// live one (see chunkClaims); nil makes writes copy shared chunks.
	claims *chunkClaims
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

// own makes slot i writable (m.at(i) then returns it): if a live snapshot may
// read its chunk, the chunk is first serialised for that snapshot's upload
// (see chunkClaims) or, when that cannot be, copied. (It leaves the slot to
// m.at: with it, it would not inline.)
func (m *valueMap) own(i uint32) {
	if m.vers[i>>chunkBits] <= m.clk.maxLive.Load() { // m.clk.shared, inlined by hand
		m.unshare(i) // out of line, so that own inlines
	}
}

func (m *valueMap) unshare(i uint32) {
	ci := i >> chunkBits
	if m.claims == nil || !m.claims.ownerTakes(ci) {
		c := new(chunk)
		*c = *m.chunks[ci]
		m.chunks[ci] = c
	}
	m.vers[ci] = m.clk.cur
}

func (m *valueMap) find(key []byte, h uint32) (uint32, bool) {
	m.used = true
	i := h & m.mask
	for {
		s := m.at(i)
		if s.hash == 0 {
			return i, false
		}
		if s.hash == h {
			var k []byte
			if s.flags == 0 {
				k = s.buf[:s.klen]
			} else {
				k, _ = s.kv(m.exts.chunks)
			}
			if bytes.Equal(k, key) {
				return i, true
			}
		}
		i = (i + 1) & m.mask
	}
}

func (m *valueMap) get(key []byte) ([]byte, bool) {
	i, ok := m.find(key, m.hash(key))
	if !ok {
		return nil, false
	}
	_, v := m.at(i).kv(m.exts.chunks)
	return v, true
}

func (m *valueMap) put(key, val []byte) {
	h := m.hash(key)
	i, ok := m.find(key, h)
	if !ok {
		m.insert(i, h, key, val)
		return
	}
	m.own(i)
	s := m.at(i)
	if !s.ext() {
		klen := int(s.klen)
		if n := klen + len(val); n <= inlineCap {
			copy(s.buf[klen:], val)
			s.vlen = uint8(len(val))
			return
		}
		e := make([]byte, klen+len(val))
		copy(e, s.buf[:klen])
		copy(e[klen:], val)
		s.setExt(m.exts.add(m.clk, extBuf{b: e, ver: m.clk.cur}), klen, len(val))
		return
	}
	idx, klen := s.extIdx(), int(s.extKlen())
	x := m.exts.get(idx)
	n := klen + len(val)
	switch {
	case n <= inlineCap:
		copy(s.buf[:], x.b[:klen]) // buf held idx and lengths; x.b is apart
		copy(s.buf[klen:], val)
		s.flags, s.klen, s.vlen = 0, uint8(klen), uint8(len(val))
		m.exts.remove(m.clk, idx)
	case len(x.b) >= n && !m.clk.shared(x.ver):
		copy(x.b[klen:], val)
		s.setExtVlen(len(val))
	default:
		e := make([]byte, n)
		copy(e, x.b[:klen])
		copy(e[klen:], val)
		m.exts.set(m.clk, idx, extBuf{b: e, ver: m.clk.cur})
		s.setExtVlen(len(val))
	}
}

// appendValue appends b to key's value (creating it if absent) without
// copying the value when its buffer has room. Writing past the used end of a
// buffer a snapshot shares is safe: the snapshot's slot copy keeps its own
// lengths and never reads past them, and only the live slot appends. ver
// stays that of the (shared) buffer, so a later put still copies.
func (m *valueMap) appendValue(key, b []byte) {
	h := m.hash(key)
	i, ok := m.find(key, h)
	if !ok {
		m.insert(i, h, key, b)
		return
	}
	m.own(i)
	s := m.at(i)
	klen, vlen := s.lens()
	old := klen + vlen
	n := old + len(b)
	if !s.ext() {
		if n <= inlineCap {
			copy(s.buf[old:], b)
			s.vlen += uint8(len(b))
			return
		}
		e := make([]byte, max(2*n, 64))
		copy(e, s.buf[:old])
		copy(e[old:], b)
		s.setExt(m.exts.add(m.clk, extBuf{b: e, ver: m.clk.cur}), klen, vlen+len(b))
		return
	}
	idx := s.extIdx()
	x := m.exts.get(idx)
	if len(x.b) >= n {
		copy(x.b[old:], b)
	} else {
		e := make([]byte, max(2*n, 64))
		copy(e, x.b[:old])
		copy(e[old:], b)
		m.exts.set(m.clk, idx, extBuf{b: e, ver: m.clk.cur})
	}
	s.setExtVlen(vlen + len(b))
}

func (m *valueMap) insert(i, h uint32, key, val []byte) {
	if m.count >= m.growAt {
		m.grow()
		i, _ = m.find(key, h)
	}
	m.own(i)
	s := m.at(i)
	s.hash = h
	if n := len(key) + len(val); n <= inlineCap {
		s.flags, s.klen, s.vlen = 0, uint8(len(key)), uint8(len(val))
		copy(s.buf[:], key)
		copy(s.buf[len(key):], val)
	} else {
		e := make([]byte, n)
		copy(e, key)
		copy(e[len(key):], val)
		s.setExt(m.exts.add(m.clk, extBuf{b: e, ver: m.clk.cur}), len(key), len(val))
	}
	m.count++
}

func (m *valueMap) delete(key []byte) {
	i, ok := m.find(key, m.hash(key))
	if !ok {
		return
	}
	if s := m.at(i); s.ext() {
		m.exts.remove(m.clk, s.extIdx())
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
			m.own(i)
			*m.at(i) = moved
			i = j
		}
	}
	m.own(i)
	*m.at(i) = slot{}
	m.count--
}

// grow doubles the table into fresh chunks; the old ones stay untouched for
// the snapshots that hold them. Slots keep their ext buffer indexes.
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

// clear empties the map in place (fresh chunks and ext slab; snapshots keep
// the old ones).
func (m *valueMap) clear() {
	m.claims = nil
	m.alloc(chunkSlots)
	m.exts = extSlab{}
	m.count = 0
}

// valueView is a valueMap as it was when a snapshot was taken.
type valueView struct {
	chunks []*chunk
	exts   []*extChunk
	count  int
}

func (m *valueMap) view() valueView {
	v := valueView{chunks: append([]*chunk(nil), m.chunks...), count: m.count}
	if len(m.exts.chunks) > 0 {
		v.exts = append([]*extChunk(nil), m.exts.chunks...)
	}
	return v
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
			key, val := s.kv(v.exts)
			if err := fn(key, val); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendChunk appends the records of chunk i of the view, in slot order,
// as format.go lays them out. Inline slots, all of them in a table of small
// keys and values, take a path without calls or branches: a record is the
// two lengths (each below 128, so one uvarint byte) and the slot's buf, copied
// whole; only its used part counts, and an empty slot's nothing.
func (v valueView) appendChunk(b []byte, i int) []byte {
	const most = 2 + inlineCap // what one inline slot writes
	b = slices.Grow(b, chunkSlots*most)
	n, dst := len(b), b[:cap(b)]
	c := v.chunks[i]
	for k := range c {
		s := &c[k]
		if s.flags != 0 {
			key, val := s.kv(v.exts)
			b = slices.Grow(appendRecord(dst[:n], key, val), (chunkSlots-k)*most)
			n, dst = len(b), b[:cap(b)]
			continue
		}
		r := dst[n : n+most]
		r[0], r[1] = s.klen, s.vlen
		*(*[inlineCap]byte)(r[2:]) = s.buf
		n += (2 + int(s.klen) + int(s.vlen)) & -int(s.hash>>31) // occupied is bit 31
	}
	return dst[:n]
}

// each walks the live map the same way.
func (m *valueMap) each(fn func(key, val []byte) error) error {
	return valueView{chunks: m.chunks, exts: m.exts.chunks, count: m.count}.each(fn)
}

// chunkClaims lets the owner serialise a chunk for an upload instead of
// copying it. At 1M keys updated a million times a second every chunk is
// written within milliseconds of a snapshot, so copy-on-write copied the
// whole table per checkpoint (64 MB), and the upload then serialised the copy.
// Instead, while one snapshot alone is live, each chunk of a table's index is
// serialised once, by whichever comes first:
//
//   - the owner, on its first write to the chunk: it serialises the chunk's
//     records into blocks the upload reads, then writes the chunk in place;
//   - the upload, walking the chunks in order: while it reads a chunk, a
//     write to it copies the chunk as before.
//
// The file then holds the records in another order, which restore does not
// mind. Each state moves forward only, by compare-and-swap, so exactly one of
// them serialises a chunk.
type chunkClaims struct {
	enc   func(b []byte, i int) []byte // the view's appendChunk
	state []atomic.Uint32

	mu      sync.Mutex
	out     [][]byte // full blocks the owner serialised, not yet read
	cur     []byte   // the block the owner is filling
	ready   atomic.Int32
	handed  int  // full blocks handed to the upload (tests look)
	dropped bool // released: keep nothing more
}

const (
	chunkFree      = iota // not serialised yet
	chunkOwner            // serialised by the owner, who writes it in place
	chunkUploading        // being read by the upload: the owner copies it
	chunkUploaded         // serialised by the upload: the owner writes in place

	claimBlock = 64 << 10
)

func newChunkClaims(v tableView) *chunkClaims {
	return &chunkClaims{enc: v.appendChunk, state: make([]atomic.Uint32, v.chunks())}
}

// ownerTakes is the owner's first write to chunk i since the snapshot: it
// reports whether the owner may now write the chunk in place; false means the
// upload is reading it and the owner must copy it.
func (c *chunkClaims) ownerTakes(i uint32) bool {
	switch c.state[i].Load() {
	case chunkUploaded:
		return true
	case chunkUploading:
		return false
	case chunkOwner:
		// Not reached: after its first write the chunk is the table's own
		// until the next snapshot. A copy is always safe.
		return false
	}
	// The owner serialises under mu so that the upload, once it has seen every
	// chunk claimed, can wait for the last of them by taking mu.
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.state[i].CompareAndSwap(chunkFree, chunkOwner) {
		return c.state[i].Load() == chunkUploaded
	}
	if c.dropped {
		return true
	}
	if c.cur == nil {
		c.cur = make([]byte, 0, claimBlock+chunkSlots*(inlineCap+2))
	}
	c.cur = c.enc(c.cur, int(i))
	if len(c.cur) >= claimBlock {
		c.out = append(c.out, c.cur)
		c.cur = nil
		c.ready.Add(1)
	}
	return true
}

// uploadTakes claims chunk i for the upload; false means the owner has
// serialised it.
func (c *chunkClaims) uploadTakes(i int) bool {
	return c.state[i].CompareAndSwap(chunkFree, chunkUploading)
}

func (c *chunkClaims) uploaded(i int) { c.state[i].Store(chunkUploaded) }

// block returns a block of records the owner serialised, or nil if none is
// full yet. With last, which the upload passes once it has claimed or skipped
// every chunk, it also returns the partial block.
func (c *chunkClaims) block(last bool) []byte {
	if !last && c.ready.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out) > 0 {
		b := c.out[0]
		c.out[0] = nil
		c.out = c.out[1:]
		c.ready.Add(-1)
		c.handed++
		return b
	}
	if last {
		b := c.cur
		c.cur = nil
		return b
	}
	return nil
}

// drop frees the blocks of a released snapshot, and lets go of its view
// (enc holds it): the table keeps its claims until the next snapshot.
func (c *chunkClaims) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropped = true
	c.out, c.cur, c.enc = nil, nil, nil
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
