package state

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
)

// Snapshot implements Backend. The synchronous part is tiny: from this
// call on, the store's writes go to an indexed batch that reads see through
// (the write window), and a background goroutine makes the Pebble checkpoint
// of the DB, which nothing writes meanwhile: hard links to the SSTs plus
// copies of the mutable files, in a directory of its own. So the checkpoint
// holds exactly the writes before the call, whatever the cut costs: with
// PebbleCutWAL it copies the WAL (flushed to the file first), with
// PebbleCutFlush it flushes the memtable first; either way it grows with the
// number of files. The first write after the checkpoint is done applies the
// window's batch to the DB (so does Snapshot, if the last one is still open).
func (p *Pebble) Snapshot(id checkpoint.ID) (Snapshot, error) {
	if p.db == nil {
		return nil, ErrClosed
	}
	if err := p.health.err(); err != nil {
		return nil, fmt.Errorf("state: pebble: snapshot %d: %w", id, err)
	}
	start := time.Now()
	if p.stale != nil {
		// No Restore came to reuse the earlier backends' DBs: delete them,
		// off the pause and the cut.
		stale := p.stale
		p.stale = nil
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			p.removeDirs(stale)
		}()
	}
	if p.chain != nil && !p.dbWritten && p.chain.extendable() {
		return p.deltaSnapshot(id, start)
	}
	p.dropChain()
	// The value caches' writes go first: the snapshot reflects them.
	if err := p.flushValues(); err != nil {
		return nil, err
	}
	if p.window != nil {
		if err := p.closeWindow(); err != nil {
			return nil, fmt.Errorf("state: pebble: snapshot %d: %w", id, err)
		}
	}
	p.snapN++
	dir := filepath.Join(p.dir, "snap", fmt.Sprintf("%s-%d", p.instance, p.snapN))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("state: pebble: snapshot %d: %w", id, err)
	}
	s := &PebbleSnapshot{id: id, n: p.snapN, dir: dir, shared: p.shared, instance: p.instance, parallel: p.opts.UploadParallelism,
		fs: p.opts.FS, done: make(chan struct{})}
	// The base of the deltas that follow, held by the backend and s.
	s.chain = &snapChain{base: s, dir: dir + "-deltas", refs: 2, maxHeld: p.opts.DeltaMemory}
	p.chain = s.chain
	p.dbWritten = false
	for _, v := range p.values {
		v.clearChanges()
	}
	p.window = &writeWindow{batch: p.db.NewIndexedBatch(), snap: s}
	hook := p.cutHook
	go func() {
		defer close(s.done)
		if hook != nil {
			hook()
		}
		cutStart := time.Now()
		s.err = p.cut(s)
		s.cut = time.Since(cutStart)
		p.windowCut.Store(true)
	}()
	s.pause = time.Since(start)
	return s, nil
}

// cut makes the Pebble checkpoint of s, on the background goroutine of the
// write window: the task writes to the window's batch meanwhile, never to
// the DB.
func (p *Pebble) cut(s *PebbleSnapshot) error {
	fail := func(err error) error {
		os.RemoveAll(s.dir)
		if broken := p.health.err(); broken != nil {
			err = broken // the error that made this one, and the store's end
		}
		return fmt.Errorf("state: pebble: snapshot %d: %w", s.id, err)
	}
	if p.opts.Cut == PebbleCutFlush {
		start := time.Now()
		if err := p.flush(); err != nil {
			return fail(fmt.Errorf("flush: %w", err))
		}
		s.flush = time.Since(start)
	}
	// WithFlushedWAL writes out the log records still buffered in memory
	// (the sync it asks for is a no-op here); without it the copy may miss
	// the last writes. Without a WAL it does nothing.
	if err := p.db.Checkpoint(s.dir, pebble.WithFlushedWAL()); err != nil {
		return fail(fmt.Errorf("checkpoint: %w", err))
	}
	// A fatal error before the checkpoint copied the MANIFEST may have left
	// a torn edit in it (Pebble writes the MANIFEST under the lock its
	// checkpoint takes to copy it): this checkpoint is not to be trusted.
	if err := p.health.err(); err != nil {
		return fail(err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fail(err)
	}
	var wal int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return fail(fmt.Errorf("unexpected %s in checkpoint", e.Name()))
		}
		s.files = append(s.files, e.Name())
		if strings.HasSuffix(e.Name(), ".log") {
			if fi, err := e.Info(); err == nil {
				wal += fi.Size()
			}
		}
	}
	slices.Sort(s.files)
	if p.opts.Cut != PebbleCutFlush && wal > walFlushThreshold && !p.flushRunning() {
		// This checkpoint carried a lot as WAL: flush it in the
		// background, so the next cut copies (and uploads) only the
		// writes made after this one, and these go up once, as a shared
		// SST. Not waited for. Not started while the last one runs: a
		// second queued memtable would make Pebble stall this call (and
		// the window with it) until the first is flushed.
		flushed, err := p.db.AsyncFlush()
		if err != nil {
			return fail(fmt.Errorf("start flush: %w", err))
		}
		p.flushing = flushed
	}
	p.opts.Logger.Debug("pebble snapshot cut", "checkpoint", s.id, "flush", s.flush, "files", len(s.files), "wal", wal)
	return nil
}

// flush flushes the memtables, as DB.Flush does, but returns the error of a
// flush that fails: DB.Flush would wait until one succeeds, as Pebble
// retries a failed flush until it does (a full disk would hold the cut,
// and the write window with it, until the disk has room again).
//
// While an earlier flush fails, it waits for Pebble's next tries rather
// than queue one more memtable behind the one Pebble cannot flush: Pebble
// stalls writes once the queue holds a few memtables' worth (each counted
// at its full size, however little it holds). The first try to end may
// have begun before the disk recovered; the second began after this call.
func (p *Pebble) flush() error {
	end, ferr := p.health.flushState()
	if ferr != nil {
		t := time.NewTimer(retryWait)
		for tries := 0; ferr != nil && tries < 2; tries++ {
			select {
			case <-end:
			case <-t.C:
				tries = 2
			}
			end, ferr = p.health.flushState()
		}
		t.Stop()
		if ferr != nil {
			return fmt.Errorf("an earlier flush failed (Pebble retries it): %w", ferr)
		}
	}
	flushed, err := p.db.AsyncFlush()
	if err != nil {
		return err
	}
	for {
		select {
		case <-flushed:
			return nil
		case <-end:
			// A flush ended: if it failed, it was of this memtable or an
			// older one (flushes go in order).
			if end, ferr = p.health.flushState(); ferr != nil {
				return ferr
			}
		}
	}
}

// retryWait bounds how long a cut waits for Pebble's next try of a failed
// flush, which comes within failSlowly's pause.
const retryWait = time.Second

// flushRunning tells whether the background flush cut started last is still
// running. Only the window's goroutine calls it.
func (p *Pebble) flushRunning() bool {
	if p.flushing == nil {
		return false
	}
	select {
	case <-p.flushing:
		p.flushing = nil
		return false
	default:
		return true
	}
}

// walFlushThreshold is how much WAL a checkpoint may carry before the cut
// starts a background flush: below it, copying and uploading the log each
// checkpoint is cheaper than a small SST and the compactions it brings.
const walFlushThreshold = 1 << 20

// PebbleSnapshot is a snapshot of the Pebble backend: a Pebble checkpoint in
// a local directory, made in the background from Snapshot on, removed by
// Release.
type PebbleSnapshot struct {
	id       checkpoint.ID
	n        int // the store's snapshot number
	dir      string
	instance string
	shared   *sharedSet
	parallel int
	pause    time.Duration
	fs       vfs.FS

	// Set by the cut before done closes.
	done  chan struct{}
	err   error
	files []string
	flush time.Duration
	cut   time.Duration

	// chain is the chain s is the base or a delta of; deltas, for a delta,
	// are the chain's deltas up to s.
	chain  *snapChain
	deltas []deltaFile

	mu       sync.Mutex
	released bool

	// up is held during an upload of a base's files; refs are their
	// references once one succeeded (the chain's deltas reuse them).
	up   sync.Mutex
	refs []checkpoint.FileRef
}

// Pause is how long Snapshot took: the time the operator did not process
// records at the barrier.
func (s *PebbleSnapshot) Pause() time.Duration { return s.pause }

// CutTime is how long the background cut took (flush, if any, and the
// Pebble checkpoint): the length of the write window. It waits for the cut.
func (s *PebbleSnapshot) CutTime() time.Duration {
	<-s.done
	return s.cut
}

// FlushTime is the part of CutTime spent flushing the memtable (zero with
// PebbleCutWAL). It waits for the cut.
func (s *PebbleSnapshot) FlushTime() time.Duration {
	<-s.done
	return s.flush
}

// isShared tells the immutable files (SSTs and blob files: Pebble never
// rewrites a file number) from the mutable ones (MANIFEST, OPTIONS, markers,
// WAL).
func isShared(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Upload implements Snapshot. Immutable files go to shared + instance + "/"
// + name, once per store instance: later snapshots that still hold a file
// reference the object already uploaded. A base snapshot's copies of the
// mutable files go to shared + instance + "/snap-<n>/" + name, and a delta
// snapshot's delta to shared + instance + "/" + its name: every file is
// shared, since the deltas of a chain reference their base's files and the
// deltas before them, and the names are unique to the store instance and
// snapshot, so no two owners write one object. Nothing goes under dir.
// The handle lists every file of the snapshot with Local its name in the DB
// directory (a delta's: its own name), the base's files first, then the
// chain's deltas in order; Incremental counts the bytes this call uploaded.
//
// The store remembers an uploaded shared file whether or not the checkpoint
// that uploaded it completes, and later checkpoints reference it. So
// retention must not delete a shared object merely because no manifest
// references it yet: delete what deleted manifests referenced and no
// retained one does (orphans of a dead store instance may go too).
func (s *PebbleSnapshot) Upload(ctx context.Context, st checkpoint.Storage, dir, shared string) (checkpoint.StateHandle, error) {
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return checkpoint.StateHandle{}, fmt.Errorf("state: pebble: upload snapshot of checkpoint %d after release", s.id)
	}
	base := s.chain.base
	refs, inc, err := base.uploadBase(ctx, st, shared)
	if err != nil {
		return checkpoint.StateHandle{}, err
	}
	h := checkpoint.StateHandle{Backend: "pebble", Files: append([]checkpoint.FileRef(nil), refs...), Incremental: inc}
	if len(s.deltas) > 0 {
		h.Backend = deltaBackend
	}
	for _, d := range s.deltas {
		ref, fresh, err := s.shared.upload(ctx, d.name, func() (checkpoint.FileRef, error) {
			if d.data != nil {
				return checkpoint.PutFile(ctx, st, shared+s.instance+"/"+d.name, bytes.NewReader(d.data))
			}
			f, err := s.fs.Open(filepath.Join(s.chain.dir, d.name))
			if err != nil {
				return checkpoint.FileRef{}, err
			}
			defer f.Close()
			return checkpoint.PutFile(ctx, st, shared+s.instance+"/"+d.name, f)
		})
		if err != nil {
			return checkpoint.StateHandle{}, fmt.Errorf("state: pebble: upload %s of checkpoint %d: %w", d.name, s.id, err)
		}
		s.chain.uploaded(d.name)
		ref.Local, ref.Shared = d.name, true
		h.Files = append(h.Files, ref)
		if fresh {
			h.Incremental += ref.Size
		}
	}
	for _, r := range h.Files {
		h.Size += r.Size
	}
	return h, nil
}

// uploadBase uploads the files of base snapshot s, once: a later call
// (a delta's of its chain) returns the references of the first that
// succeeded, with no incremental bytes. A failed call leaves the next to
// try again.
func (s *PebbleSnapshot) uploadBase(ctx context.Context, st checkpoint.Storage, shared string) ([]checkpoint.FileRef, int64, error) {
	s.up.Lock()
	defer s.up.Unlock()
	if s.refs != nil {
		return s.refs, 0, nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if s.err != nil {
		return nil, 0, s.err
	}
	refs := make([]checkpoint.FileRef, len(s.files))
	fresh := make([]bool, len(s.files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.parallel)
	for i, name := range s.files {
		g.Go(func() error {
			put := func(obj string) (checkpoint.FileRef, error) {
				path := filepath.Join(s.dir, name)
				f, err := s.fs.Open(path)
				if err != nil {
					return checkpoint.FileRef{}, err
				}
				defer f.Close()
				return checkpoint.PutFile(gctx, st, obj, f)
			}
			var err error
			if isShared(name) {
				refs[i], fresh[i], err = s.shared.upload(gctx, name, func() (checkpoint.FileRef, error) {
					return put(shared + s.instance + "/" + name)
				})
			} else {
				// This snapshot's copy of a mutable file, which the deltas
				// on it share.
				refs[i], err = put(shared + s.instance + "/" + fmt.Sprintf("snap-%d/", s.n) + name)
				fresh[i] = true
			}
			if err != nil {
				return fmt.Errorf("state: pebble: upload %s of checkpoint %d: %w", name, s.id, err)
			}
			refs[i].Local, refs[i].Shared = name, true
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, 0, err
	}
	var inc int64
	for i, r := range refs {
		if fresh[i] {
			inc += r.Size
		}
	}
	s.refs = refs
	return refs, inc, nil
}

// Release implements Snapshot: it removes the checkpoint directory, once the
// cut is done. It may run on any goroutine, more than once.
func (s *PebbleSnapshot) Release() {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	s.chain.release()
}

// sharedSet is what one store instance has in storage: its immutable files,
// by name in the DB directory, with their references. Concurrent uploads of
// one file wait for the first. An upload that failed leaves no entry, so a
// later snapshot tries again.
type sharedSet struct {
	mu sync.Mutex
	m  map[string]*sharedEntry
}

type sharedEntry struct {
	done chan struct{}
	ref  checkpoint.FileRef
	err  error
}

// newSharedSet starts a set with files already in storage (a restore's).
func newSharedSet(have map[string]checkpoint.FileRef) *sharedSet {
	s := &sharedSet{m: make(map[string]*sharedEntry, len(have))}
	done := make(chan struct{})
	close(done)
	for name, ref := range have {
		s.m[name] = &sharedEntry{done: done, ref: ref}
	}
	return s
}

// upload returns the reference of name, calling put if no upload of it
// succeeded or is under way; fresh reports whether this call uploaded it.
func (s *sharedSet) upload(ctx context.Context, name string, put func() (checkpoint.FileRef, error)) (ref checkpoint.FileRef, fresh bool, err error) {
	for {
		s.mu.Lock()
		e, ok := s.m[name]
		if !ok {
			e = &sharedEntry{done: make(chan struct{})}
			s.m[name] = e
			s.mu.Unlock()
			ref, err := put()
			s.mu.Lock()
			e.ref, e.err = ref, err
			if err != nil {
				delete(s.m, name)
			}
			close(e.done)
			s.mu.Unlock()
			return ref, err == nil, err
		}
		s.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return checkpoint.FileRef{}, false, ctx.Err()
		}
		if e.err == nil {
			return e.ref, false, nil
		}
		// The other upload failed; try ourselves.
	}
}
