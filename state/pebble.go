package state

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// PebbleOptions configure the Pebble backend. The zero value is usable.
type PebbleOptions struct {
	// MemTableSize bounds one memtable, in bytes (default 64 MiB). A cut
	// flushes (PebbleCutFlush) or copies the WAL of (PebbleCutWAL) the
	// unflushed memtables, so this bounds the cut's length too: the write
	// window, not the pause at the barrier.
	MemTableSize int64
	// Cut is how a snapshot comes to hold the writes still in memtables
	// (default PebbleCutFlush).
	Cut PebbleCut
	// CacheSize is the block cache, in bytes (default 64 MiB). The backends
	// of one Factory share one cache; OpenPebble makes its own.
	CacheSize int64
	// UploadParallelism bounds concurrent uploads of one snapshot and
	// downloads of one restore (default 4).
	UploadParallelism int
	// Logger receives Pebble's own messages: info at debug level, errors at
	// error level. nil discards them (Pebble's default logger is chatty).
	Logger *slog.Logger
	// DeltaMemory bounds the bytes of a store's delta snapshots held in
	// memory until storage has them (default 1 MiB); a delta that would
	// go over it is written to a local file first, which its upload reads.
	// Negative: every delta is written to a local file, so that every
	// checkpoint needs the local disk, as a base snapshot does.
	DeltaMemory int64
	// FS is the filesystem the stores live on: Pebble's own files, a
	// snapshot's reads for its upload, a restore's downloads and hard
	// links (default vfs.Default, the local disk). Tests wrap it to make
	// the disk fail (errorfs; internal/diskfault).
	FS vfs.FS

	// valueCache bounds one value table's cache (default
	// valueCacheBytes): tests make it small, to spill often.
	valueCache int
}

// PebbleCut is how Snapshot captures the writes that are still in memtables,
// so that a checkpoint holds exactly the writes made before it.
type PebbleCut int

const (
	// PebbleCutDefault is PebbleCutFlush. Measured at 4 GB with 1% of the
	// keys written per 1 s interval, the flush cut's write window was
	// shorter and cheaper to close than the WAL cut's (no log copy, no
	// log re-uploaded per checkpoint, no log written per write), and a
	// restore has no log to replay.
	PebbleCutDefault PebbleCut = iota
	// PebbleCutWAL keeps a write-ahead log (never synced: local files are
	// not the truth) and lets the checkpoint copy it: the cut does not
	// flush, and a restore replays the copied log. The cut grows with the
	// bytes written since the last background flush (at most a memtable or
	// a few), copied within the page cache; each checkpoint uploads those
	// log bytes again.
	PebbleCutWAL
	// PebbleCutFlush runs without a WAL and flushes the memtable in the
	// cut: the cut includes writing an SST of up to a memtable.
	PebbleCutFlush
)

func (c PebbleCut) String() string {
	switch c {
	case PebbleCutDefault:
		return "default"
	case PebbleCutWAL:
		return "wal"
	case PebbleCutFlush:
		return "flush"
	}
	return fmt.Sprintf("PebbleCut(%d)", int(c))
}

const (
	defaultMemTableSize      = 64 << 20
	defaultCacheSize         = 64 << 20
	defaultUploadParallelism = 4
	defaultDeltaMemory       = 1 << 20
)

func (o PebbleOptions) withDefaults() (PebbleOptions, error) {
	switch {
	case o.MemTableSize < 0:
		return o, fmt.Errorf("state: pebble: MemTableSize %d is negative", o.MemTableSize)
	case o.MemTableSize >= 4<<30:
		return o, fmt.Errorf("state: pebble: MemTableSize %d is 4 GiB or more", o.MemTableSize)
	case o.CacheSize < 0:
		return o, fmt.Errorf("state: pebble: CacheSize %d is negative", o.CacheSize)
	case o.UploadParallelism < 0:
		return o, fmt.Errorf("state: pebble: UploadParallelism %d is negative", o.UploadParallelism)
	case o.Cut < PebbleCutDefault || o.Cut > PebbleCutFlush:
		return o, fmt.Errorf("state: pebble: unknown %v", o.Cut)
	}
	if o.Cut == PebbleCutDefault {
		o.Cut = PebbleCutFlush
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = defaultMemTableSize
	}
	if o.CacheSize == 0 {
		o.CacheSize = defaultCacheSize
	}
	if o.UploadParallelism == 0 {
		o.UploadParallelism = defaultUploadParallelism
	}
	if o.valueCache <= 0 {
		o.valueCache = valueCacheBytes
	}
	switch {
	case o.DeltaMemory == 0:
		o.DeltaMemory = defaultDeltaMemory
	case o.DeltaMemory < 0:
		o.DeltaMemory = 0
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	return o, nil
}

// NewPebble returns a Factory of Pebble backends, each in the directory the
// runtime gives it. The backends share one block cache, which lives as long
// as the process.
func NewPebble(opts PebbleOptions) Factory {
	var (
		once  sync.Once
		cache *pebble.Cache
	)
	return func(task int, operator, dir string) (Backend, error) {
		o, err := opts.withDefaults()
		if err != nil {
			return nil, err
		}
		once.Do(func() { cache = pebble.NewCache(o.CacheSize) })
		return openPebble(dir, o, cache)
	}
}

// Pebble keeps state in a Pebble DB on local disk and snapshots it
// incrementally: a snapshot is a Pebble checkpoint (hard links to the
// immutable SSTs plus copies of the small mutable files), and an upload sends
// only the SSTs this store instance has not uploaded before.
//
// The local directory is a cache, never the truth: nothing is synced (the
// WAL, if any, only feeds checkpoints), and a new backend never opens the DB
// an earlier one left in dir. What survives a crash is what the last
// checkpoint uploaded. But a Restore reuses the SSTs that earlier DBs in dir
// still hold (a task that moved away and back, restarted after a failure, or
// whose process was killed), once their size and checksum match the
// checkpoint's references: see LastRestore.
//
// Layout under dir:
//
//	db-<instance>/                the live DB
//	db-<instance>/weir-restored   the shared objects a restore laid out there
//	db-<other>/                   DBs of earlier backends, until this one's
//	                              first Restore, Snapshot or Close
//	snap/<instance>-<n>/          the checkpoint of one base Snapshot, until
//	                              it and the deltas on it are released
//	snap/<instance>-<n>-deltas/   the delta files of that base's chain
//
// Keyspace: the catalog maps each table name to a short id (uvarint, from 1)
// and is stored in the DB under id 0, so that every snapshot carries it and a
// restore agrees with the writer on the ids. A table's keys all start with its
// id:
//
//	catalog  0x00 name                     -> kind byte, uvarint id
//	value    id key                        -> value
//	list     id key                        -> items, each uvarint length + bytes (a merge appends)
//	map      id escaped(key) userKey       -> value
//
// escaped(key) writes 0x00 as 0x00 0xff and ends with 0x00 0x01: it is
// unambiguous and keeps (key, userKey) byte order, so Map.Iterate is a prefix
// scan in user-key order and Map.Scan one scan of the table in (key, userKey)
// order.
type Pebble struct {
	dir   string
	opts  PebbleOptions
	cache *pebble.Cache // nil: the Factory owns it

	db       *pebble.DB // nil once closed
	health   *dbHealth  // what Pebble reported of db's errors
	dbDir    string
	lock     *pebble.Lock // on dbDir, from before its files are laid out until after db closes
	instance string
	shared   *sharedSet // SSTs this store instance has in storage

	// stale are the DB directories earlier backends left in dir: the next
	// Restore may reuse their SSTs; it, the first Snapshot or Close deletes
	// them. bg waits for a deletion Snapshot started.
	stale       []string
	bg          sync.WaitGroup
	lastRestore RestoreStats

	tables map[string]*pebbleTable // declared
	values map[string]*cachedValue // the value tables, with their caches
	// rows are the keys in the value caches, lastRow the last looked up
	// (see keyRow).
	rows    map[string]*keyRow
	lastRow *keyRow
	catalog map[string]catalogEntry // as stored in db
	nextID  uint64
	// window, if not nil, takes the writes while a snapshot's cut runs in
	// the background; windowCut tells that the cut is done, so the next
	// write may close the window. iters counts open iterators: a window
	// closes only when none reads its batch.
	window    *writeWindow
	windowCut atomic.Bool
	iters     int
	// flushing is closed when the background flush the last cut started is
	// done; nil if none was started since. Only cuts use it, one at a time.
	flushing <-chan struct{}
	snapN    int
	// chain is the base snapshot and deltas the next delta snapshot
	// extends; nil: the next snapshot is a base (see pebble_delta.go).
	chain *snapChain
	// dbWritten tells that something was written to the DB (not only to
	// the value caches) since the chain's base was cut: the next snapshot
	// must be a base.
	dbWritten bool
	deltaBuf  []byte
	// cutHook, if set, runs first in the next cut (tests hold cuts open
	// with it).
	cutHook func()
	// lastApply is how long closing the last write window took (for the
	// benchmark).
	lastApply time.Duration

	getBuf []byte
	keyBuf []byte
}

// OpenPebble opens an empty Pebble backend in dir, creating dir if needed.
// What an earlier backend left there is deleted, except its DB directory:
// the next Restore may reuse its files (see Pebble).
func OpenPebble(dir string, opts PebbleOptions) (*Pebble, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cache := pebble.NewCache(o.CacheSize)
	p, err := openPebble(dir, o, cache)
	cache.Unref() // the DB holds its own reference
	if err != nil {
		return nil, err
	}
	return p, nil
}

func openPebble(dir string, opts PebbleOptions, cache *pebble.Cache) (*Pebble, error) {
	dir, err := canonicalDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state: pebble: %w", err)
	}
	stale, err := findStale(dir)
	if err != nil {
		return nil, fmt.Errorf("state: pebble: clean %s: %w", dir, err)
	}
	p := &Pebble{dir: dir, opts: opts, cache: cache, stale: stale, tables: map[string]*pebbleTable{}, catalog: map[string]catalogEntry{}}
	inst, err := newInstanceID()
	if err != nil {
		return nil, err
	}
	dbDir := filepath.Join(dir, "db-"+inst)
	lock, err := lockNewDBDir(dbDir)
	if err != nil {
		return nil, fmt.Errorf("state: pebble: open: %w", err)
	}
	db, health, err := p.openDB(dbDir, lock, false)
	if err != nil {
		os.RemoveAll(dbDir)
		lock.Close()
		return nil, fmt.Errorf("state: pebble: open %s: %w", dbDir, err)
	}
	p.db, p.health, p.dbDir, p.lock, p.instance, p.shared = db, health, dbDir, lock, inst, newSharedSet(nil)
	p.nextID = 1
	return p, nil
}

// openDB opens the DB in dbDir under lock; mustExist refuses to create one
// (a restore's files must be there). The health hears Pebble's errors.
func (p *Pebble) openDB(dbDir string, lock *pebble.Lock, mustExist bool) (*pebble.DB, *dbHealth, error) {
	h := newDBHealth(p.opts.Logger)
	o := p.pebbleOptions(h)
	o.Lock = lock
	o.ErrorIfNotExists = mustExist
	db, err := pebble.Open(dbDir, o)
	if err == nil {
		err = h.err() // a fatal error while opening
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return db, h, nil
}

func (p *Pebble) pebbleOptions(h *dbHealth) *pebble.Options {
	return &pebble.Options{
		FS:           failSlowly{noSyncFS{p.opts.FS}, h},
		Cache:        p.cache,
		MemTableSize: uint64(p.opts.MemTableSize),
		// The checkpoint is the durability; a WAL, unsynced, only lets the
		// checkpoint carry the memtables without a flush.
		DisableWAL:         p.opts.Cut != PebbleCutWAL,
		FormatMajorVersion: pebble.FormatNewest,
		Merger:             listMerger,
		Logger:             pebbleLogger{l: p.opts.Logger, h: h},
		EventListener:      h.listener(),
		// Each checkpoint uploads the whole MANIFEST: rotate it early (Pebble
		// still waits until the edits outnumber the live files).
		MaxManifestFileSize: 1 << 20,
		// Pebble stops writes when L0 holds 12 sublevels, and a memtable
		// rotation (AsyncFlush in a cut) waits out such a stall: hundreds
		// of milliseconds, measured at 1 GB with 1% churn per checkpoint.
		// Let L0 grow instead (reads get slower until compactions catch
		// up), as CockroachDB does.
		L0StopWritesThreshold: 1000,
		// A write window's batch over half a memtable is applied as a
		// memtable of its own; with only two allowed, that apply waits
		// for the flush a cut started.
		MemTableStopWritesThreshold: memTableStopWrites,
		// Larger files than Pebble's default (2 MB in L0, doubling per
		// level from Lbase): a cut links every file, so at 4 GB the
		// default's 1,700 files made the cut, and the write window with
		// it, several times longer.
		TargetFileSizes: [7]int64{8 << 20},
		// Every checkpoint flushes a small L0 file; compacting L0 into
		// Lbase after 8 of them instead of 4 rewrites Lbase half as often.
		// With 1% of 1 GB written per 1 s interval the bytes uploaded per
		// checkpoint fell from 14.0/10.7% to 11.7/9.5% of the full size
		// (two runs each); point reads may look at more L0 files.
		L0CompactionThreshold: 8,
	}
}

// newInstanceID names a store instance: SST file numbers are unique only
// within one store's history, so shared objects are keyed by instance too.
func newInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("state: pebble: instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Name implements Backend.
func (p *Pebble) Name() string { return "pebble" }

// Instance is the id of the current store instance; shared files this
// instance uploads are named shared + Instance() + "/" + file name.
func (p *Pebble) Instance() string { return p.instance }

// ---- catalog ----

const catalogID = 0

type pebbleTable struct {
	p      *Pebble
	name   string
	kind   tableKind
	id     uint64
	prefix []byte // uvarint(id)
	upper  []byte // the first key after the table
}

func (t *pebbleTable) setID(id uint64) {
	t.id = id
	t.prefix = binary.AppendUvarint(nil, id)
	t.upper = prefixSuccessor(t.prefix)
}

func catalogKey(name string) []byte {
	return append(binary.AppendUvarint(nil, catalogID), name...)
}

// readCatalog returns the catalog stored in db.
func readCatalog(db *pebble.DB) (map[string]catalogEntry, error) {
	lo := binary.AppendUvarint(nil, catalogID)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixSuccessor(lo)})
	if err != nil {
		return nil, err
	}
	out := map[string]catalogEntry{}
	for ok := it.First(); ok; ok = it.Next() {
		name := string(it.Key()[len(lo):])
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, err
		}
		e, err := decodeCatalogEntry(v)
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("catalog entry %q: %w", name, err)
		}
		out[name] = e
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

type catalogEntry struct {
	kind tableKind
	id   uint64
}

func (e catalogEntry) encode() []byte {
	return binary.AppendUvarint([]byte{byte(e.kind)}, e.id)
}

func decodeCatalogEntry(v []byte) (catalogEntry, error) {
	if len(v) < 2 {
		return catalogEntry{}, errors.New("too short")
	}
	k := tableKind(v[0])
	if k < kindValue || k > kindMap {
		return catalogEntry{}, fmt.Errorf("unknown state kind %d", k)
	}
	id, n := binary.Uvarint(v[1:])
	if n <= 0 || n != len(v)-1 || id == catalogID {
		return catalogEntry{}, errors.New("bad table id")
	}
	return catalogEntry{kind: k, id: id}, nil
}

func (p *Pebble) declare(name string, kind tableKind) (*pebbleTable, error) {
	if p.db == nil {
		return nil, ErrClosed
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	if t, ok := p.tables[name]; ok {
		if t.kind != kind {
			return nil, fmt.Errorf("state: %q is declared as %s state, not %s", name, t.kind, kind)
		}
		return t, nil
	}
	// A table restored but not declared yet keeps its id.
	t := &pebbleTable{p: p, name: name, kind: kind}
	if e, ok := p.catalog[name]; ok {
		if e.kind != kind {
			return nil, fmt.Errorf("state: %q is %s state in the restored snapshot, not %s", name, e.kind, kind)
		}
		t.setID(e.id)
	} else {
		t.setID(p.nextID)
		p.nextID++
		e := catalogEntry{kind: kind, id: t.id}
		rw, err := p.rw()
		if err != nil {
			return nil, err
		}
		p.dbWritten = true
		if err := rw.Set(catalogKey(name), e.encode(), pebble.NoSync); err != nil {
			return nil, fmt.Errorf("state: pebble: declare %q: %w", name, err)
		}
		p.catalog[name] = e
	}
	p.tables[name] = t
	return t, nil
}

// Value implements Backend.
func (p *Pebble) Value(name string) (ValueTable, error) {
	t, err := p.declare(name, kindValue)
	if err != nil {
		return nil, err
	}
	if c := p.values[name]; c != nil {
		return c, nil
	}
	c := newCachedValue(t, len(p.values))
	if p.values == nil {
		p.values = map[string]*cachedValue{}
	}
	p.values[name] = c
	return c, nil
}

// flushValues writes the value tables' caches to Pebble.
func (p *Pebble) flushValues() error {
	for _, c := range p.values {
		if err := c.flush(); err != nil {
			return err
		}
	}
	return nil
}

// dropValues forgets the value tables' caches.
func (p *Pebble) dropValues() {
	for _, c := range p.values {
		c.drop()
	}
}

// List implements Backend.
func (p *Pebble) List(name string) (ListTable, error) {
	t, err := p.declare(name, kindList)
	if err != nil {
		return nil, err
	}
	return (*pebbleList)(t), nil
}

// Map implements Backend.
func (p *Pebble) Map(name string) (MapTable, error) {
	t, err := p.declare(name, kindMap)
	if err != nil {
		return nil, err
	}
	return (*pebbleMap)(t), nil
}

// writeWindow is where the writes of the task go while a snapshot's cut runs
// on the DB: an indexed batch, so that reads see them over the DB.
type writeWindow struct {
	batch *pebble.Batch
	snap  *PebbleSnapshot
}

// maxWindowBytes bounds the batch of a write window: past it, the next write
// waits for the cut and applies the batch, rather than growing it further.
const maxWindowBytes = 64 << 20

// pebbleRW is what tables read and write: the DB, or during a write window
// its batch.
type pebbleRW interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
	Set(key, value []byte, opts *pebble.WriteOptions) error
	Merge(key, value []byte, opts *pebble.WriteOptions) error
	Delete(key []byte, opts *pebble.WriteOptions) error
	DeleteRange(start, end []byte, opts *pebble.WriteOptions) error
}

// rw returns where the tables read and write now, closing a write window
// whose cut is done (or whose batch is full) if no iterator reads it.
func (p *Pebble) rw() (pebbleRW, error) {
	if p.db == nil {
		return nil, ErrClosed
	}
	if p.health.troubled.Load() {
		if err := p.checkRoom(0); err != nil {
			return nil, err
		}
	}
	w := p.window
	if w == nil {
		return p.db, nil
	}
	if p.iters == 0 && (p.windowCut.Load() || w.batch.Len() > maxWindowBytes) {
		if err := p.closeWindow(); err != nil {
			return nil, err
		}
		return p.db, nil
	}
	return w.batch, nil
}

// closeWindow waits for the cut of the open write window, then applies the
// window's writes to the DB.
func (p *Pebble) closeWindow() error {
	w := p.window
	<-w.snap.done
	p.window = nil
	p.windowCut.Store(false)
	var err error
	if p.health.troubled.Load() {
		err = p.checkRoom(int64(w.batch.Len()))
	}
	if err == nil {
		start := time.Now()
		err = p.db.Apply(w.batch, pebble.NoSync)
		p.lastApply = time.Since(start)
	}
	w.batch.Close()
	if err != nil {
		// The window's writes are gone: no later snapshot may go without
		// them.
		err = fmt.Errorf("state: pebble: apply the writes made during snapshot %d: %w", w.snap.id, err)
		if !errors.Is(err, ErrBroken) {
			err = fmt.Errorf("%w: %w", ErrBroken, err)
		}
		p.health.breakWith(err)
		return err
	}
	return nil
}

// dropWindow waits for the cut of the open write window, if any, and
// discards its writes (the state is about to be replaced or deleted).
func (p *Pebble) dropWindow() {
	if w := p.window; w != nil {
		<-w.snap.done
		p.window = nil
		p.windowCut.Store(false)
		w.batch.Close()
	}
}

// Close implements Backend. It closes the DB and deletes the DB directories
// of earlier backends, but keeps its own: the next backend in dir may reuse
// its SSTs (whoever stops using dir for good deletes it). Outstanding
// snapshots stay valid until released.
func (p *Pebble) Close() error {
	if p.db == nil {
		return nil
	}
	p.dropValues()
	p.dropWindow()
	p.dropChain()
	err := p.db.Close()
	p.db = nil
	// Only now, with the DB closed, may another backend delete its directory.
	if lerr := p.lock.Close(); err == nil {
		err = lerr
	}
	p.bg.Wait()
	p.dropStale()
	if err != nil {
		return fmt.Errorf("state: pebble: close: %w", err)
	}
	return nil
}
