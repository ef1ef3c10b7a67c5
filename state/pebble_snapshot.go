package state

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
)

// Snapshot implements Backend: it makes a Pebble checkpoint, hard links to
// the SSTs plus copies of the mutable files, in a directory of its own. The
// writes still in memtables get there by the cut (see PebbleCut): with
// PebbleCutWAL the checkpoint copies the WAL (flushed to the file first),
// with PebbleCutFlush Snapshot flushes the memtable first. It runs on the
// goroutine that writes, so nothing is written meanwhile and the checkpoint
// holds exactly the writes before the call. Its cost is the WAL copy or the
// flush, plus the checkpoint, which grows with the number of files.
func (p *Pebble) Snapshot(id checkpoint.ID) (Snapshot, error) {
	if p.db == nil {
		return nil, ErrClosed
	}
	start := time.Now()
	if p.opts.Cut == PebbleCutFlush {
		if err := p.db.Flush(); err != nil {
			return nil, fmt.Errorf("state: pebble: snapshot %d: flush: %w", id, err)
		}
	}
	flushed := time.Now()
	p.snapN++
	dir := filepath.Join(p.dir, "snap", fmt.Sprintf("%s-%d", p.instance, p.snapN))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("state: pebble: snapshot %d: %w", id, err)
	}
	// WithFlushedWAL writes out the log records still buffered in memory
	// (the sync it asks for is a no-op here); without it the copy may miss
	// the last writes. Without a WAL it does nothing.
	if err := p.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return nil, fmt.Errorf("state: pebble: snapshot %d: checkpoint: %w", id, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("state: pebble: snapshot %d: %w", id, err)
	}
	s := &PebbleSnapshot{id: id, dir: dir, shared: p.shared, instance: p.instance, parallel: p.opts.UploadParallelism}
	var wal int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("state: pebble: snapshot %d: unexpected %s in checkpoint", id, e.Name())
		}
		s.files = append(s.files, e.Name())
		if strings.HasSuffix(e.Name(), ".log") {
			if fi, err := e.Info(); err == nil {
				wal += fi.Size()
			}
		}
	}
	if p.opts.Cut != PebbleCutFlush && wal > walFlushThreshold {
		// This checkpoint carried a lot as WAL: flush it in the
		// background, so the next cut copies (and uploads) only the
		// writes made after this one, and these go up once, as a shared
		// SST. Not waited for: processing resumes at once.
		if _, err := p.db.AsyncFlush(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("state: pebble: snapshot %d: start flush: %w", id, err)
		}
	}
	slices.Sort(s.files)
	s.pause, s.flush = time.Since(start), flushed.Sub(start)
	p.opts.Logger.Debug("pebble snapshot", "checkpoint", id, "pause", s.pause, "flush", s.flush, "files", len(s.files))
	return s, nil
}

// walFlushThreshold is how much WAL a checkpoint may carry before Snapshot
// starts a background flush: below it, copying and uploading the log each
// checkpoint is cheaper than a small SST and the compactions it brings.
const walFlushThreshold = 1 << 20

// PebbleSnapshot is the synchronous part of a Pebble snapshot: a Pebble
// checkpoint in a local directory, removed by Release.
type PebbleSnapshot struct {
	id       checkpoint.ID
	dir      string
	instance string
	shared   *sharedSet
	files    []string
	parallel int
	pause    time.Duration
	flush    time.Duration

	mu       sync.Mutex
	released bool
}

// Pause is how long Snapshot took (flush, if any, and checkpoint): the time
// the operator did not process records.
func (s *PebbleSnapshot) Pause() time.Duration { return s.pause }

// FlushTime is the part of Pause spent flushing the memtable (zero with
// PebbleCutWAL).
func (s *PebbleSnapshot) FlushTime() time.Duration { return s.flush }

// isShared tells the immutable files (SSTs and blob files: Pebble never
// rewrites a file number) from the mutable ones (MANIFEST, OPTIONS, markers,
// WAL).
func isShared(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Upload implements Snapshot. Immutable files go to shared + instance + "/"
// + name, once per store instance: later snapshots that still hold a file
// reference the object already uploaded. Mutable files go to dir + name.
// The handle lists every file of the snapshot with Local its name in the DB
// directory; Incremental counts the bytes this call uploaded.
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
	refs := make([]checkpoint.FileRef, len(s.files))
	fresh := make([]bool, len(s.files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.parallel)
	for i, name := range s.files {
		g.Go(func() error {
			put := func(obj string) (checkpoint.FileRef, error) {
				f, err := os.Open(filepath.Join(s.dir, name))
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
				refs[i], err = put(dir + name)
				fresh[i] = true
			}
			if err != nil {
				return fmt.Errorf("state: pebble: upload %s of checkpoint %d: %w", name, s.id, err)
			}
			refs[i].Local, refs[i].Shared = name, isShared(name)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return checkpoint.StateHandle{}, err
	}
	h := checkpoint.StateHandle{Backend: "pebble", Files: refs}
	for i, r := range refs {
		h.Size += r.Size
		if fresh[i] {
			h.Incremental += r.Size
		}
	}
	return h, nil
}

// Release implements Snapshot: it removes the checkpoint directory. It may
// run on any goroutine, more than once.
func (s *PebbleSnapshot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	os.RemoveAll(s.dir)
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
