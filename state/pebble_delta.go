package state

// Delta snapshots. A base snapshot is a Pebble checkpoint: the value caches
// are written out, the memtable flushed (PebbleCutFlush), the files linked,
// the mutable ones copied and uploaded. At 100 ms checkpoints that costs
// more CPU than the records (25 ms per task per checkpoint, measured with
// the count job), mostly for small SSTs and the compactions they bring. But
// when the value caches absorbed every write since the last base (no table
// wrote to Pebble itself, no cache overflowed), the state is the base plus
// the caches' changes: a delta snapshot writes just those changes, as one
// small file, and Pebble is not touched. Its handle lists the base's files
// and every delta since, in order; a restore opens the base and applies
// the deltas. This is what Flink's changelog state backend does with a
// log of state changes, kept here to what the caches hold.
//
// A chain is a base and its deltas. The next snapshot is a base when the
// DB was written since the base (dbWritten), the base's cut failed, a
// delta could not be written, or the chain's deltas reach maxChainDeltas
// or maxChainBytes (which bound what a restore applies).
//
// Each delta is an immutable shared file named by the store instance and
// snapshot number, uploaded once and referenced by the later snapshots of
// its chain, as SSTs are; the base's files, its copies of the mutable ones
// included, are shared files too, uploaded once, by the first upload of
// the chain that succeeds, and referenced from there. The base's
// local checkpoint and the deltas stay on disk until every snapshot of the
// chain and the backend let go of it, so an upload that failed can be
// repeated by a later snapshot.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// deltaBackend names the backend of a handle with deltas: a build from
// before delta snapshots refuses to restore it (it checks the name), where
// it would open the base without the deltas and go on with state that
// lacks them. A handle without deltas is "pebble", which any build reads.
const deltaBackend = "pebble-delta"

const (
	// maxChainDeltas bounds the deltas of a chain: each is a file of every
	// later handle and of a restore.
	maxChainDeltas = 100
	// maxChainBytes bounds the deltas' bytes a restore applies.
	maxChainBytes = 16 << 20
	// deltaSuffix ends the name of a delta file.
	deltaSuffix = ".wdelta"
)

// deltaMagic starts a delta file; its last byte is the format version.
var deltaMagic = []byte("weir-delta\x01")

const (
	deltaSet    = 1
	deltaDelete = 2
)

// snapChain is a base snapshot and the deltas since, with the references
// held on it: the backend's, while it builds on the chain, and each of its
// snapshots'. The last release removes the base's checkpoint directory and
// the deltas.
type snapChain struct {
	base *PebbleSnapshot
	dir  string // the local copies of the deltas not held in memory
	// deltas is read by uploads (under mu) and appended to by the store's
	// snapshots.
	deltas  []deltaFile
	bytes   int64
	dirMade bool

	mu   sync.Mutex
	refs int
	// held is the bytes of deltas[i].data, under mu, at most maxHeld
	// (PebbleOptions.DeltaMemory). Most deltas are uploaded by the
	// checkpoint that took them, so a chain holds one at a time; while
	// storage is down they wait here, up to maxHeld, then in files.
	held, maxHeld int64
}

// deltaFile is one delta of a chain: its bytes (data, until uploaded),
// or, if data is nil, a file in the chain's dir.
type deltaFile struct {
	name string // in dir, if written there; its Local name in handles
	data []byte
}

// hold says whether a delta of n bytes may be kept in memory until its
// upload, and counts it if so.
func (c *snapChain) hold(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held+n > c.maxHeld {
		return false
	}
	c.held += n
	return true
}

// uploaded lets go of the bytes of the delta called name, which storage
// now has: later snapshots of the chain reference the object (see
// sharedSet). The snapshots that copied the chain's deltas before keep
// theirs until they are released.
func (c *snapChain) uploaded(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.deltas {
		if d := &c.deltas[i]; d.name == name && d.data != nil {
			c.held -= int64(len(d.data))
			d.data = nil
		}
	}
}

func (c *snapChain) acquire() {
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
}

func (c *snapChain) release() {
	c.mu.Lock()
	c.refs--
	last := c.refs == 0
	c.mu.Unlock()
	if last {
		os.RemoveAll(c.base.dir)
		os.RemoveAll(c.dir)
	}
}

// extendable tells whether the next snapshot may be a delta of c.
func (c *snapChain) extendable() bool {
	select {
	case <-c.base.done:
	default:
		return false // the base's cut still runs: the checkpoint was given up
	}
	return c.base.err == nil && len(c.deltas) < maxChainDeltas && c.bytes < maxChainBytes
}

// dropChain lets go of the chain: the next snapshot is a base.
func (p *Pebble) dropChain() {
	if p.chain != nil {
		p.chain.release()
		p.chain = nil
	}
}

// deltaSnapshot takes a delta snapshot of checkpoint id on p.chain: the
// value caches' changes since the last snapshot go to a new delta file
// (none if there are none).
func (p *Pebble) deltaSnapshot(id checkpoint.ID, start time.Time) (Snapshot, error) {
	c := p.chain
	p.snapN++
	buf := append(p.deltaBuf[:0], deltaMagic...)
	n := 0
	for _, v := range p.values {
		for _, e := range v.changes {
			buf = appendDeltaEntry(buf, v.t.prefix, e)
			n++
		}
	}
	p.deltaBuf = buf
	if n > 0 {
		name := fmt.Sprintf("delta-%s-%d%s", p.instance, p.snapN, deltaSuffix)
		d := deltaFile{name: name}
		if c.hold(int64(len(buf))) {
			// No file on the barrier's path: the upload writes the bytes.
			d.data = append([]byte(nil), buf...)
		} else {
			err := error(nil)
			if !c.dirMade {
				err = p.opts.FS.MkdirAll(c.dir, 0o755)
				c.dirMade = err == nil
			}
			if err == nil {
				err = writeLocalFile(p.opts.FS, filepath.Join(c.dir, name), buf)
			}
			if err != nil {
				// The changes are in no delta: only a base may follow.
				p.dropChain()
				return nil, fmt.Errorf("state: pebble: snapshot %d: write delta: %w", id, err)
			}
		}
		c.mu.Lock()
		c.deltas = append(c.deltas, d)
		c.mu.Unlock()
		c.bytes += int64(len(buf))
		for _, v := range p.values {
			v.clearChanges()
		}
	}
	c.acquire()
	done := make(chan struct{})
	close(done)
	c.mu.Lock()
	deltas := append([]deltaFile(nil), c.deltas...)
	c.mu.Unlock()
	s := &PebbleSnapshot{id: id, n: p.snapN, dir: c.base.dir, shared: p.shared, instance: p.instance, parallel: p.opts.UploadParallelism,
		fs: p.opts.FS, done: done, chain: c, deltas: deltas}
	s.pause = time.Since(start)
	p.opts.Logger.Debug("pebble delta snapshot", "checkpoint", id, "entries", n, "bytes", len(buf), "deltas", len(c.deltas))
	return s, nil
}

// appendDeltaEntry appends e of the table with key prefix prefix.
func appendDeltaEntry(buf, prefix []byte, e *cacheEntry) []byte {
	op := byte(deltaSet)
	if !e.ok {
		op = deltaDelete
	}
	buf = append(buf, op)
	buf = binary.AppendUvarint(buf, uint64(len(prefix)+len(e.key)))
	buf = append(append(buf, prefix...), e.key...)
	if e.ok {
		buf = binary.AppendUvarint(buf, uint64(len(e.v)))
		buf = append(buf, e.v...)
	}
	return buf
}

// applyDelta applies the delta file data to b.
func applyDelta(b *pebble.Batch, data []byte) error {
	if !bytes.HasPrefix(data, deltaMagic[:len(deltaMagic)-1]) {
		return errors.New("not a delta file")
	}
	if v := data[len(deltaMagic)-1]; v != deltaMagic[len(deltaMagic)-1] {
		return fmt.Errorf("delta format %d, this build reads %d", v, deltaMagic[len(deltaMagic)-1])
	}
	rest := data[len(deltaMagic):]
	field := func() ([]byte, error) {
		l, n := binary.Uvarint(rest)
		if n <= 0 || l > uint64(len(rest)-n) {
			return nil, fmt.Errorf("corrupt at byte %d", len(data)-len(rest))
		}
		f := rest[n : n+int(l)]
		rest = rest[n+int(l):]
		return f, nil
	}
	for len(rest) > 0 {
		op := rest[0]
		rest = rest[1:]
		key, err := field()
		if err != nil {
			return err
		}
		switch op {
		case deltaSet:
			v, err := field()
			if err != nil {
				return err
			}
			err = b.Set(key, v, nil)
		case deltaDelete:
			err = b.Delete(key, nil)
		default:
			return fmt.Errorf("corrupt at byte %d: op %d", len(data)-len(rest)-len(key)-2, op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// isDelta tells a delta file by its name.
func isDelta(name string) bool { return strings.HasSuffix(name, deltaSuffix) }

// applyDeltas applies the delta files of handle, laid out in dir, to db in
// the handle's order.
func applyDeltas(db *pebble.DB, fsys vfs.FS, dir string, handle checkpoint.StateHandle) (n int, err error) {
	for _, f := range handle.Files {
		if !isDelta(f.Local) {
			continue
		}
		data, err := readLocalFile(fsys, filepath.Join(dir, f.Local))
		if err != nil {
			return n, fmt.Errorf("delta %s: %w", f.Name, err)
		}
		b := db.NewBatch()
		err = applyDelta(b, data)
		if err == nil {
			err = db.Apply(b, pebble.NoSync)
		}
		b.Close()
		if err != nil {
			return n, fmt.Errorf("delta %s: %w", f.Name, err)
		}
		n++
	}
	return n, nil
}

func writeLocalFile(fsys vfs.FS, path string, data []byte) error {
	f, err := fsys.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readLocalFile(fsys vfs.FS, path string) ([]byte, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
