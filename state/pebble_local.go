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
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// Reuse of local files by a restore.
//
// A task that comes back to a worker (it moved away and back, it restarted
// after a failure, its process was killed and restarted with the same state
// directory) finds there the DB of its previous backend, whose SSTs are
// mostly those of the checkpoint it restores. Pebble never rewrites an SST,
// and a shared object is named by the store instance that uploaded it plus
// its file name, so the object <instance>/<file> is the file <file> in
// db-<instance>/, or in a DB that a restore laid it out in (the
// weir-restored list there names those). A restore hard-links such a copy
// instead of downloading the object, once the copy's size and checksum
// match the reference in the handle: a file damaged on disk, or cut short by
// a crash, is downloaded instead.
//
// Whose directory is it: a DB directory is locked (Pebble's LOCK) from
// before its files are laid out until after its DB closes, and a directory
// is deleted only under that lock. So a backend never deletes the DB of
// another one that still runs in the same dir, in this process or another,
// and the files it links from a stale DB come from one that is closed or
// cannot change them (SSTs are immutable either way).

// RestoreStats is what one Restore did.
type RestoreStats struct {
	// Files is the number of files the restored handle lists.
	Files int
	// Reused is how many of them were hard-linked from a DB on local disk
	// rather than downloaded.
	Reused int
	// ReusedBytes and DownloadedBytes are the sizes of the files reused and
	// downloaded. A failed restore counts what it had done.
	ReusedBytes     int64
	DownloadedBytes int64
	// Took is the whole restore, opening the DB included.
	Took time.Duration
}

// LastRestore tells what the last Restore did, whether or not it succeeded;
// the zero value if there was none.
func (p *Pebble) LastRestore() RestoreStats { return p.lastRestore }

// restoredList is the file in a restored DB's directory that names the
// shared objects the restore laid out there, one "<instance>/<file>" a line:
// the files a DB did not write itself, which a later restore may reuse too.
// Pebble ignores files it does not know, and its checkpoints leave them out.
const restoredList = "weir-restored"

// canonicalDir creates dir and returns it absolute and without symlinks:
// Pebble's table of the locks this process holds is keyed by path.
func canonicalDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// findStale returns the DB directories earlier backends left in dir, and
// deletes the rest of what they left (snapshots, stray files).
func findStale(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, "db-") && e.IsDir():
			stale = append(stale, filepath.Join(dir, n))
		case strings.HasPrefix(n, "db-") || n == "snap":
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return nil, err
			}
		}
	}
	return stale, nil
}

// lockNewDBDir creates the directory of a new DB and locks it: from now on
// no other backend deletes it.
func lockNewDBDir(dbDir string) (*pebble.Lock, error) {
	if err := os.Mkdir(dbDir, 0o755); err != nil {
		return nil, err
	}
	lock, err := pebble.LockDirectory(dbDir, vfs.Default)
	if err != nil {
		os.RemoveAll(dbDir)
		return nil, fmt.Errorf("lock %s: %w", dbDir, err)
	}
	return lock, nil
}

// removeDBDir deletes the DB directory d unless its lock is held: a DB is
// open there, or a restore is laying it out.
func removeDBDir(d string) error {
	lock, err := pebble.LockDirectory(d, vfs.Default)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone already
	}
	if err != nil {
		return fmt.Errorf("in use: %w", err)
	}
	err = os.RemoveAll(d)
	if cerr := lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropStale deletes the DB directories of earlier backends. One that cannot
// go (in use) stays for a later backend to find.
func (p *Pebble) dropStale() {
	stale := p.stale
	p.stale = nil
	p.removeDirs(stale)
}

func (p *Pebble) removeDirs(dirs []string) {
	for _, d := range dirs {
		if err := removeDBDir(d); err != nil {
			p.opts.Logger.Warn("pebble: keep an earlier DB directory", "dir", d, "err", err)
		}
	}
}

// localCopies tells where shared objects may have a copy on local disk.
type localCopies struct {
	dirs     map[string]string   // store instance -> its DB directory
	restored map[string][]string // "<instance>/<file>" -> DB directories a restore laid it out in
}

// findLocalCopies indexes the DBs of earlier backends and the current one.
func (p *Pebble) findLocalCopies() *localCopies {
	lc := &localCopies{dirs: map[string]string{}, restored: map[string][]string{}}
	for _, d := range append(p.stale[:len(p.stale):len(p.stale)], p.dbDir) {
		lc.dirs[strings.TrimPrefix(filepath.Base(d), "db-")] = d
		for _, obj := range readRestoredList(d) {
			lc.restored[obj] = append(lc.restored[obj], d)
		}
	}
	return lc
}

// candidates returns the local files that may be the object f names.
func (lc *localCopies) candidates(f checkpoint.FileRef) []string {
	inst, ok := objectInstance(f)
	if !ok {
		return nil
	}
	var out []string
	if d, ok := lc.dirs[inst]; ok {
		out = append(out, filepath.Join(d, f.Local))
	}
	for _, d := range lc.restored[inst+"/"+f.Local] {
		out = append(out, filepath.Join(d, f.Local))
	}
	return out
}

// objectInstance returns the store instance that uploaded the shared object
// f names: its name ends in "<instance>/<Local>" (see PebbleSnapshot.Upload).
func objectInstance(f checkpoint.FileRef) (string, bool) {
	rest, ok := strings.CutSuffix(f.Name, "/"+f.Local)
	if !ok {
		return "", false
	}
	inst := rest[strings.LastIndexByte(rest, '/')+1:]
	return inst, inst != ""
}

// writeRestoredList writes the restored list of a DB directory a restore of
// handle lays out. It goes first, so that even a restore cut short by a
// crash leaves its files findable.
func (p *Pebble) writeRestoredList(dbDir string, handle checkpoint.StateHandle) error {
	var b strings.Builder
	for _, f := range handle.Files {
		if inst, ok := objectInstance(f); ok && f.Shared && isShared(f.Local) {
			b.WriteString(inst + "/" + f.Local + "\n")
		}
	}
	f, err := p.opts.FS.Create(filepath.Join(dbDir, restoredList), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRestoredList returns the objects the restored list of dbDir names, if
// any. Nothing is synced, so the list may be cut short: only whole lines
// count, and the lines that name no shared file are skipped.
func readRestoredList(dbDir string) []string {
	b, err := os.ReadFile(filepath.Join(dbDir, restoredList))
	if err != nil {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	lines = lines[:len(lines)-1] // after the last newline: empty, or a torn line
	var out []string
	for _, l := range lines {
		inst, file, ok := strings.Cut(l, "/")
		if ok && inst != "" && file == filepath.Base(file) && isShared(file) {
			out = append(out, l)
		}
	}
	return out
}

// reuse hard-links into path a local copy of f whose size and checksum
// match f's, and tells whether it did.
func (p *Pebble) reuse(ctx context.Context, lc *localCopies, newDir *checkpoint.File, f checkpoint.FileRef, path string) bool {
	for _, src := range lc.candidates(f) {
		fi, err := os.Stat(src)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
			continue // compacted away since, or cut short
		}
		if err := p.opts.FS.Link(src, path); err != nil {
			p.opts.Logger.Debug("pebble restore: cannot link a local copy", "file", src, "err", err)
			continue
		}
		err = verifyLocal(ctx, newDir, f)
		if err == nil {
			return true
		}
		p.opts.Logger.Warn("pebble restore: local copy does not match the checkpoint", "file", src, "object", f.Name, "err", err)
		if err := os.Remove(path); err != nil {
			return false // the download will fail on the file in the way
		}
	}
	return false
}

// verifyLocal reads the file f.Local of the directory newDir to the end,
// checking its size and checksum against f as a download does.
func verifyLocal(ctx context.Context, newDir *checkpoint.File, f checkpoint.FileRef) error {
	ref := f
	ref.Name = f.Local
	rc, err := checkpoint.GetVerified(ctx, newDir, ref)
	if err != nil {
		return err
	}
	defer rc.Close()
	// Not io.Copy to io.Discard: it reads in 8 KiB pieces.
	buf := make([]byte, 256<<10)
	for {
		_, err := rc.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
