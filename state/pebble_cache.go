package state

import "github.com/cockroachdb/pebble/v2"

// Value tables of the Pebble backend keep the values the task reads and
// writes in memory, and write them to Pebble only at a snapshot (or when
// the cache is full): a key updated on every record of an interval costs
// one Pebble write per interval, not one per record, and its reads cost a
// map lookup, not a memtable search through every version written since
// the last flush. Pebble was where the count job spent 70% of its CPU (a
// Get and a Set per record and table). Flink's RocksDB backend reads and
// writes through on every access; Kafka Streams' record cache works as
// this one does.
//
// The cache holds what Pebble would. A snapshot reflects every write before
// it: a base snapshot writes the cache out to Pebble first; a delta
// snapshot (see pebble_delta.go) writes only the entries changed since the
// last snapshot to a file, and the cache keeps them until it is written out.
// A Restore that succeeds drops the cache (one that fails keeps it, with
// the state); Close drops it too (what was written since the last snapshot
// is never read again: the next backend restores a checkpoint).

// valueCacheBytes bounds one table's cache by default (keys, values and about 64
// bytes of overhead an entry): past it the cache is written out and
// emptied. Small, so that a snapshot's pause to write it out stays short
// and a table of large values goes to Pebble about as it is written: 16K
// entries of a count, 2K of 512-byte values.
const valueCacheBytes = 1 << 20

const entryOverhead = 64

type cacheEntry struct {
	key   string // the map's key
	v     []byte
	ok    bool // present (false: known absent, or deleted)
	dirty bool // differs from Pebble
	// changed: written since the last snapshot (and listed in changes)
	changed bool
}

// cachedValue is a Pebble value table with its cache.
type cachedValue struct {
	t *pebbleTable
	// slot is the table's place in a keyRow; entries are its cached
	// entries, in the order they came.
	slot    int
	entries []*cacheEntry
	dirty   int
	// changes are the entries written since the last snapshot, the next
	// delta's contents.
	changes []*cacheEntry
	bytes   int // keys, values and overhead of the entries
}

// keyRow is a key's entries in the value caches of a backend, one slot a
// table: a function that reads and writes several value states of the
// record's key finds them all with one map lookup (the count job's count
// and sum took two, 8% of its CPU). The entry of slot 0 is in the row, so a
// single table costs no more than a map of its own; n counts the slots in
// use, and a row with none leaves the map.
type keyRow struct {
	key   string
	n     int
	has0  bool
	first cacheEntry    // slot 0's entry, if has0
	more  []*cacheEntry // slots 1 and up; nil: not cached there
}

// row is key's row in p's value caches, nil if none. The last row looked
// up is kept: a function reads and then writes its key's values, the
// lookups after the first are this compare.
func (p *Pebble) row(key []byte) *keyRow {
	if r := p.lastRow; r != nil && r.key == string(key) {
		return r
	}
	r := p.rows[string(key)]
	if r != nil {
		p.lastRow = r
	}
	return r
}

// lookup is the entry of key, nil if none.
func (c *cachedValue) lookup(key []byte) *cacheEntry {
	r := c.t.p.row(key)
	switch {
	case r == nil:
		return nil
	case c.slot == 0:
		if r.has0 {
			return &r.first
		}
		return nil
	case c.slot <= len(r.more):
		return r.more[c.slot-1]
	}
	return nil
}

func newCachedValue(t *pebbleTable, slot int) *cachedValue {
	return &cachedValue{t: t, slot: slot}
}

func (c *cachedValue) Get(key []byte) ([]byte, bool, error) {
	if e := c.lookup(key); e != nil {
		return e.v, e.ok, nil
	}
	v, ok, err := c.t.get(c.t.key(key))
	if err != nil {
		return nil, false, err
	}
	e, err := c.entry(key)
	if err != nil {
		return nil, false, err
	}
	c.set(e, v, ok)
	return e.v, ok, nil
}

// set gives e value v, keeping the byte count.
func (c *cachedValue) set(e *cacheEntry, v []byte, ok bool) {
	c.bytes += len(v) - len(e.v)
	e.v, e.ok = append(e.v[:0], v...), ok
}

func (c *cachedValue) Put(key, value []byte) error {
	e := c.lookup(key)
	if e == nil {
		var err error
		if e, err = c.entry(key); err != nil {
			return err
		}
	}
	c.set(e, value, true)
	c.markDirty(e)
	return nil
}

func (c *cachedValue) Delete(key []byte) error {
	e := c.lookup(key)
	if e == nil {
		var err error
		if e, err = c.entry(key); err != nil {
			return err
		}
	}
	c.set(e, nil, false)
	c.markDirty(e)
	return nil
}

func (c *cachedValue) markDirty(e *cacheEntry) {
	if !e.dirty {
		e.dirty = true
		c.dirty++
	}
	if !e.changed {
		e.changed = true
		c.changes = append(c.changes, e)
	}
}

// clearChanges starts the next snapshot's changes.
func (c *cachedValue) clearChanges() {
	for _, e := range c.changes {
		e.changed = false
	}
	clear(c.changes)
	c.changes = c.changes[:0]
}

// entry adds an entry for key, writing the cache out and emptying it
// first if it is full.
func (c *cachedValue) entry(key []byte) (*cacheEntry, error) {
	if c.bytes >= c.t.p.opts.valueCache {
		if err := c.flush(); err != nil {
			return nil, err
		}
		c.drop()
	}
	p := c.t.p
	r := p.row(key)
	if r == nil {
		if p.rows == nil {
			p.rows = map[string]*keyRow{}
		}
		r = &keyRow{key: string(key)}
		p.rows[r.key] = r
		p.lastRow = r
	}
	var e *cacheEntry
	if c.slot == 0 {
		r.first, r.has0 = cacheEntry{key: r.key}, true
		e = &r.first
	} else {
		if c.slot > len(r.more) {
			r.more = append(r.more, make([]*cacheEntry, c.slot-len(r.more))...)
		}
		e = &cacheEntry{key: r.key}
		r.more[c.slot-1] = e
	}
	r.n++
	c.entries = append(c.entries, e)
	c.bytes += len(key) + entryOverhead
	return e, nil
}

// flush writes the dirty entries to Pebble, in batches: a write of its own
// per entry costs a commit of Pebble's each. A batch stays small next to a
// memtable (1/64): one that does not fit the rest of the memtable rotates
// it, and Pebble counts each queued memtable at its full size against the
// memtables it allows before it stalls writes, which flushes that fail
// (a full disk) fill up.
func (c *cachedValue) flush() error {
	if c.dirty == 0 {
		return nil
	}
	rw, err := c.t.wdb()
	if err != nil {
		return err
	}
	db, _ := rw.(*pebble.DB) // else a write window's batch: write to it
	var b *pebble.Batch
	var done []*cacheEntry
	apply := func() error {
		if c.t.p.health.troubled.Load() {
			if err := c.t.p.checkRoom(int64(b.Len())); err != nil {
				return err
			}
		}
		if err := db.Apply(b, pebble.NoSync); err != nil {
			return c.t.wrap("write out", err)
		}
		b.Reset()
		for _, e := range done {
			e.dirty = false
			c.dirty--
		}
		done = done[:0]
		return nil
	}
	w := rw
	if db != nil {
		b = db.NewBatch()
		defer b.Close()
		w = b
	}
	limit := int(c.t.p.opts.MemTableSize / 64)
	for _, e := range c.entries {
		if !e.dirty {
			continue
		}
		k := c.t.key([]byte(e.key))
		if e.ok {
			err = w.Set(k, e.v, pebble.NoSync)
		} else {
			err = w.Delete(k, pebble.NoSync)
		}
		if err != nil {
			return c.t.wrap("write out", err)
		}
		done = append(done, e)
		if b != nil && b.Len() >= limit {
			if err := apply(); err != nil {
				return err
			}
		}
	}
	if b != nil {
		return apply()
	}
	for _, e := range done {
		e.dirty = false
	}
	c.dirty = 0
	return nil
}

// drop forgets the cache, written out or not.
func (c *cachedValue) drop() {
	p := c.t.p
	for _, e := range c.entries {
		r := p.rows[e.key] // e may be r.first: cleared below
		if c.slot == 0 {
			r.first, r.has0 = cacheEntry{}, false
		} else {
			r.more[c.slot-1] = nil
		}
		if r.n--; r.n == 0 {
			delete(p.rows, r.key)
		}
	}
	p.lastRow = nil
	clear(c.entries)
	c.entries = c.entries[:0]
	clear(c.changes)
	c.changes = c.changes[:0]
	c.dirty, c.bytes = 0, 0
}
