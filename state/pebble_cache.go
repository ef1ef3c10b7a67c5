package state

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
// The cache holds what Pebble would: Snapshot writes it out first, so a
// snapshot reflects every write before it; a Restore that succeeds drops
// it (one that fails keeps it, with the state); Close drops it too (what was written since the last snapshot is never read again:
// the next backend restores a checkpoint).

// valueCacheBytes bounds one table's cache (keys, values and about 64
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
}

// cachedValue is a Pebble value table with its cache.
type cachedValue struct {
	t     *pebbleTable
	m     map[string]*cacheEntry
	dirty int
	bytes int // keys, values and overhead of the entries
	// last is the entry of the last key looked up: a keyed function reads
	// and then writes its key's value, the second lookup is this compare.
	last *cacheEntry
}

// lookup is the entry of key, nil if none.
func (c *cachedValue) lookup(key []byte) *cacheEntry {
	if c.last != nil && c.last.key == string(key) {
		return c.last
	}
	e := c.m[string(key)]
	if e != nil {
		c.last = e
	}
	return e
}

func newCachedValue(t *pebbleTable) *cachedValue {
	return &cachedValue{t: t, m: map[string]*cacheEntry{}}
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
}

// entry adds an entry for key, writing the cache out and emptying it
// first if it is full.
func (c *cachedValue) entry(key []byte) (*cacheEntry, error) {
	if c.bytes >= valueCacheBytes {
		if err := c.flush(); err != nil {
			return nil, err
		}
		c.drop()
	}
	e := &cacheEntry{key: string(key)}
	c.m[e.key] = e
	c.last = e
	c.bytes += len(key) + entryOverhead
	return e, nil
}

// flush writes the dirty entries to Pebble.
func (c *cachedValue) flush() error {
	if c.dirty == 0 {
		return nil
	}
	for _, e := range c.m {
		if !e.dirty {
			continue
		}
		var err error
		if e.ok {
			err = c.t.set(c.t.key([]byte(e.key)), e.v)
		} else {
			err = c.t.del(c.t.key([]byte(e.key)))
		}
		if err != nil {
			return err
		}
		e.dirty = false
		c.dirty--
	}
	return nil
}

// drop forgets the cache, written out or not.
func (c *cachedValue) drop() {
	clear(c.m)
	c.dirty, c.bytes = 0, 0
	c.last = nil
}
