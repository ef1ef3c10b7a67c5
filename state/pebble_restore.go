package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
)

// Restore implements Backend. It downloads every file of handle into a new,
// empty DB directory, in parallel, checking each file's size and checksum
// before it opens the DB there; then it swaps that DB in for the current one
// as a new store instance. A failed restore (a missing or corrupt file names
// the object) leaves the current state as it was.
//
// Shared files of the snapshot are referenced, not uploaded again, by later
// snapshots: they are in storage already, under the instance that wrote them.
func (p *Pebble) Restore(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle) error {
	if p.db == nil {
		return ErrClosed
	}
	p.dropWindow()
	if handle.Backend != "pebble" {
		return fmt.Errorf("state: restore a %q snapshot into the pebble backend", handle.Backend)
	}
	if len(handle.Files) == 0 {
		return errors.New("state: pebble: restore: the state handle lists no files")
	}
	seen := map[string]bool{}
	have := map[string]checkpoint.FileRef{}
	for _, f := range handle.Files {
		if f.Local == "" || f.Local != filepath.Base(f.Local) || f.Local == "." || f.Local == ".." {
			return fmt.Errorf("state: pebble: restore: %s has a bad local name %q", f.Name, f.Local)
		}
		if seen[f.Local] {
			return fmt.Errorf("state: pebble: restore: two files named %q", f.Local)
		}
		seen[f.Local] = true
		if f.Shared {
			have[f.Local] = f
		}
	}

	inst, err := newInstanceID()
	if err != nil {
		return err
	}
	dbDir := filepath.Join(p.dir, "db-"+inst)
	if err := os.Mkdir(dbDir, 0o755); err != nil {
		return fmt.Errorf("state: pebble: restore: %w", err)
	}
	db, cat, err := p.restoreInto(ctx, st, handle, dbDir)
	if err != nil {
		os.RemoveAll(dbDir)
		return fmt.Errorf("state: pebble: restore: %w", err)
	}

	old, oldDir := p.db, p.dbDir
	p.db, p.dbDir, p.instance, p.shared = db, dbDir, inst, newSharedSet(have)
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
	cerr := old.Close()
	os.RemoveAll(oldDir)
	if derr != nil {
		return derr
	}
	if cerr != nil {
		p.opts.Logger.Warn("pebble: close the replaced DB", "err", cerr)
	}
	return nil
}

// restoreInto downloads handle's files into dir, opens the DB there and
// checks its catalog against the declared tables.
func (p *Pebble) restoreInto(ctx context.Context, st checkpoint.Storage, handle checkpoint.StateHandle, dir string) (*pebble.DB, map[string]catalogEntry, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.UploadParallelism)
	for _, f := range handle.Files {
		g.Go(func() error {
			if err := download(gctx, st, f, filepath.Join(dir, f.Local)); err != nil {
				return fmt.Errorf("file %s (%s): %w", f.Name, f.Local, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	db, err := pebble.Open(dir, p.pebbleOptions())
	if err != nil {
		return nil, nil, fmt.Errorf("open the downloaded DB: %w", err)
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
		err = fmt.Errorf("read catalog: %w", err)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, cat, nil
}

// download copies f into path, verifying its size and checksum: the file is
// complete and intact once it returns nil.
func download(ctx context.Context, st checkpoint.Storage, f checkpoint.FileRef, path string) error {
	rc, err := checkpoint.GetVerified(ctx, st, f)
	if err != nil {
		return err
	}
	defer rc.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, rc)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
