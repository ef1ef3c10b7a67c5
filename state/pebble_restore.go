package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
)

// Restore implements Backend. It lays out every file of handle in a new,
// empty DB directory, in parallel, checking each file's size and checksum
// before it opens the DB there; then it swaps that DB in for the current one
// as a new store instance. A failed restore (a missing or corrupt file names
// the object) leaves the current state as it was.
//
// A shared file with a copy on local disk (in the DB of an earlier backend
// in dir, or in the current one) whose size and checksum match is
// hard-linked, not downloaded: see LastRestore. After the restore, failed or
// not, the earlier backends' DBs are deleted.
//
// Shared files of the snapshot are referenced, not uploaded again, by later
// snapshots: they are in storage already, under the instance that wrote them.
func (p *Pebble) Restore(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle) error {
	if p.db == nil {
		return ErrClosed
	}
	// The value caches stay as they are until the DB is replaced, and the
	// writes of an open write window go to the DB first (its cut waited
	// for): a failed restore leaves the state as it was, their writes
	// included (the next snapshot writes them out).
	var werr error
	if p.window != nil {
		werr = p.closeWindow()
	}
	start := time.Now()
	var c restoreCounters
	err := p.restore(ctx, st, handle, &c)
	if err != nil && werr != nil {
		// The DB is the one that lost the window's writes, broken.
		err = errors.Join(err, werr)
	}
	s := RestoreStats{
		Files:           len(handle.Files),
		Reused:          int(c.reused.Load()),
		ReusedBytes:     c.reusedBytes.Load(),
		DownloadedBytes: c.downloadedBytes.Load(),
		Took:            time.Since(start),
	}
	p.lastRestore = s
	attrs := []any{"instance", p.instance, "files", s.Files, "reused", s.Reused,
		"reused_bytes", s.ReusedBytes, "downloaded_bytes", s.DownloadedBytes, "took", s.Took}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	p.opts.Logger.Info("pebble restore", attrs...)
	p.dropStale()
	return err
}

// restoreCounters count what a restore did, from its parallel downloads.
type restoreCounters struct {
	reused, reusedBytes, downloadedBytes atomic.Int64
}

func (p *Pebble) restore(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle, c *restoreCounters) error {
	if handle.Backend != "pebble" && handle.Backend != deltaBackend {
		return fmt.Errorf("state: restore a %q snapshot into the pebble backend", handle.Backend)
	}
	if len(handle.Files) == 0 {
		return errors.New("state: pebble: restore: the state handle lists no files")
	}
	seen := map[string]bool{}
	have := map[string]checkpoint.FileRef{}
	for _, f := range handle.Files {
		if f.Local == "" || f.Local != filepath.Base(f.Local) || f.Local == "." || f.Local == ".." || f.Local == restoredList {
			return fmt.Errorf("state: pebble: restore: %s has a bad local name %q", f.Name, f.Local)
		}
		if seen[f.Local] {
			return fmt.Errorf("state: pebble: restore: two files named %q", f.Local)
		}
		seen[f.Local] = true
		if isDelta(f.Local) && handle.Backend != deltaBackend {
			return fmt.Errorf("state: pebble: restore: delta file %s in a %q handle", f.Name, handle.Backend)
		}
		if f.Shared && isShared(f.Local) { // SSTs and blobs: the files a later base may hold again
			have[f.Local] = f
		}
	}

	inst, err := newInstanceID()
	if err != nil {
		return err
	}
	dbDir := filepath.Join(p.dir, "db-"+inst)
	lock, err := lockNewDBDir(dbDir)
	if err != nil {
		return fmt.Errorf("state: pebble: restore: %w", err)
	}
	db, health, cat, err := p.restoreInto(ctx, st, handle, dbDir, lock, c)
	if err != nil {
		os.RemoveAll(dbDir)
		lock.Close()
		return fmt.Errorf("state: pebble: restore: %w", err)
	}

	old, oldDir, oldLock := p.db, p.dbDir, p.lock
	p.db, p.health, p.dbDir, p.lock, p.instance, p.shared = db, health, dbDir, lock, inst, newSharedSet(have)
	// The caches are of the replaced DB, whatever happens below.
	p.dropValues()
	p.dropChain() // of the replaced instance: the next snapshot is a base
	p.flushing = nil
	p.catalog = cat
	p.nextID = 1
	for _, e := range cat {
		p.nextID = max(p.nextID, e.id+1)
	}
	// Declared tables keep their objects (handles hold them) and take the
	// snapshot's ids; those the snapshot lacks get new ids and start empty.
	var derr error
	for name, t := range p.tables {
		if e, ok := cat[name]; ok {
			t.setID(e.id)
			continue
		}
		t.setID(p.nextID)
		p.nextID++
		e := catalogEntry{kind: t.kind, id: t.id}
		if err := db.Set(catalogKey(name), e.encode(), pebble.NoSync); err != nil && derr == nil {
			derr = fmt.Errorf("state: pebble: restore: declare %q: %w", name, err)
		}
		p.catalog[name] = e
	}
	// The replaced DB holds nothing the new one needs (it linked what it
	// reused), but its directory goes only once it is closed.
	cerr := old.Close()
	if err := oldLock.Close(); cerr == nil {
		cerr = err
	}
	p.removeDirs([]string{oldDir})
	if derr != nil {
		return derr
	}
	if cerr != nil {
		p.opts.Logger.Warn("pebble: close the replaced DB", "err", cerr)
	}
	return nil
}

// restoreInto lays out handle's files in dir (locked by lock), reusing local
// copies where it can and downloading the rest, opens the DB there and
// checks its catalog against the declared tables.
func (p *Pebble) restoreInto(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle, dir string, lock *pebble.Lock, c *restoreCounters) (*pebble.DB, *dbHealth, map[string]catalogEntry, error) {
	if err := p.writeRestoredList(dir, handle); err != nil {
		return nil, nil, nil, err
	}
	local := p.findLocalCopies()
	newDir, err := checkpoint.NewFile(dir) // to verify local copies as downloads are
	if err != nil {
		return nil, nil, nil, err
	}
	// Delta files go beside the DB, to be applied once it is open.
	deltaDir := filepath.Join(p.dir, "snap", "restore-"+filepath.Base(dir))
	defer os.RemoveAll(deltaDir)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.UploadParallelism)
	for _, f := range handle.Files {
		g.Go(func() error {
			path := filepath.Join(dir, f.Local)
			if isDelta(f.Local) {
				if err := p.opts.FS.MkdirAll(deltaDir, 0o755); err != nil {
					return err
				}
				path = filepath.Join(deltaDir, f.Local)
			} else if f.Shared && p.reuse(gctx, local, newDir, f, path) {
				c.reused.Add(1)
				c.reusedBytes.Add(f.Size)
				return nil
			}
			if err := download(gctx, st, f, path, p.opts.FS); err != nil {
				return fmt.Errorf("file %s (%s): %w", f.Name, f.Local, err)
			}
			c.downloadedBytes.Add(f.Size)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, err
	}
	db, health, err := p.openDB(dir, lock, true)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open the restored DB: %w", restoredDBError(handle, err))
	}
	if _, err := applyDeltas(db, p.opts.FS, deltaDir, handle); err != nil {
		db.Close()
		return nil, nil, nil, fmt.Errorf("apply the restored deltas: %w", err)
	}
	cat, err := readCatalog(db)
	if err == nil {
		for name, t := range p.tables {
			if e, ok := cat[name]; ok && e.kind != t.kind {
				err = fmt.Errorf("%q is %s state here, %s in the snapshot", name, t.kind, e.kind)
				break
			}
		}
	} else {
		err = fmt.Errorf("read catalog: %w", restoredDBError(handle, err))
	}
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	return db, health, cat, nil
}

// download copies f into path, verifying its size and checksum: the file is
// complete and intact once it returns nil. A file in the way is an error,
// not overwritten: it is one a reuse could not remove.
func download(ctx context.Context, st checkpoint.Storage, f checkpoint.FileRef, path string, fsys vfs.FS) error {
	rc, err := checkpoint.GetVerified(ctx, st, f)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := fsys.Stat(path); err == nil {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	}
	out, err := fsys.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, rc)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// restoredDBError adds to an error of Pebble about a restored DB the
// objects in checkpoint storage it is about. Every file passed its size
// and checksum, so a file Pebble refuses was uploaded that way, and the
// object is what an operator can look at; Pebble names only local files,
// by name or, for a table, by its number. When it names none of them (a
// bad OPTIONS file, say), the error lists the snapshot's other files
// (mutable files and deltas), which are few: the tables are many, and
// Pebble names those.
func restoredDBError(handle checkpoint.StateHandle, err error) error {
	msg := err.Error()
	var named, own []string
	for _, f := range handle.Files {
		if mentionsFile(msg, f.Local) {
			named = append(named, f.Name)
		}
		if !isShared(f.Local) {
			own = append(own, f.Name)
		}
	}
	if len(named) == 0 {
		named = own
	}
	if len(named) == 0 {
		return err
	}
	return fmt.Errorf("%w (restored from %s)", err, strings.Join(named, ", "))
}

// mentionsFile says whether msg names the local file: by its name, or a
// table or blob file by its number alone ("000004" for "000004.sst") as a
// whole number, not part of a longer one.
func mentionsFile(msg, local string) bool {
	if local == "" {
		return false
	}
	if strings.Contains(msg, local) {
		return true
	}
	num := strings.TrimSuffix(strings.TrimSuffix(local, ".sst"), ".blob")
	if num == local || num == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(msg[i:], num)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(num)
		if (start == 0 || !isDigit(msg[start-1])) && (end == len(msg) || !isDigit(msg[end])) {
			return true
		}
		i = start + 1
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
