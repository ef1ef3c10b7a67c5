package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// tempPrefix marks files being written; List never shows them and object
// names may not use it.
const tempPrefix = ".tmp-"

// File is a Storage in a local (or mounted) directory. Writes are atomic and
// durable: data goes to a temporary file that is synced and then renamed
// (Put) or hard-linked (PutIfAbsent, which so never replaces an object) to
// its name, and the directory is synced. It is safe for concurrent use, also
// by several processes, on a filesystem with POSIX rename and link.
type File struct {
	root string
	mu   sync.Mutex
	// synced are folders whose name this File has synced into their
	// parent (or made and synced): a folder found made, by another writer
	// that may not have synced it yet, is synced again before it counts.
	synced map[string]bool
}

// maxSynced bounds synced; past it the set starts afresh, which costs
// only syncs done again.
const maxSynced = 4096

var _ Storage = (*File)(nil)

// NewFile returns a storage rooted at dir, creating dir if needed.
func NewFile(dir string) (*File, error) {
	if dir == "" {
		return nil, errors.New("checkpoint: file storage: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: file storage %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: file storage: %w", err)
	}
	return &File{root: abs}, nil
}

// Dir returns the storage's root directory.
func (f *File) Dir() string { return f.root }

func (f *File) path(name string) string { return filepath.Join(f.root, filepath.FromSlash(name)) }

// Put writes r to name atomically, replacing any object there.
func (f *File) Put(ctx context.Context, name string, r io.Reader) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp, err := f.writeTemp(ctx, name, r)
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	dst := f.path(name)
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put %s: %w", name, err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	return nil
}

// PutIfAbsent writes data to name atomically unless name exists (ErrExists).
func (f *File) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	tmp, err := f.writeTemp(ctx, name, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	defer os.Remove(tmp)
	dst := f.path(name)
	if err := os.Link(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("put %s: %w", name, ErrExists)
		}
		return fmt.Errorf("put %s: %w", name, err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	return nil
}

// writeTemp writes r into a synced temporary file next to name's place.
func (f *File) writeTemp(ctx context.Context, name string, r io.Reader) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	dir := filepath.Dir(f.path(name))
	var tf *os.File
	// A concurrent Delete may remove the (then empty) directory between
	// MkdirAll and CreateTemp; try again then.
	for attempt := 0; ; attempt++ {
		if err := f.mkdirSynced(dir); err != nil {
			return "", err
		}
		var err error
		tf, err = os.CreateTemp(dir, tempPrefix+"*")
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return "", err
		}
		// The folder went (pruned, by this File or another process):
		// what this File knows of it is stale, and it is made again.
		f.forget(dir)
	}
	_, err := io.Copy(tf, ctxReader{ctx, r})
	if err == nil {
		err = tf.Sync()
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tf.Name())
		return "", err
	}
	return tf.Name(), nil
}

// Get opens the object name, or returns ErrNotFound.
func (f *File) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	fh, err := os.Open(f.path(name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("get %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	if st, err := fh.Stat(); err == nil && st.IsDir() {
		fh.Close()
		return nil, fmt.Errorf("get %s: %w (a folder)", name, ErrNotFound)
	}
	return fh, nil
}

// List returns the names under prefix, sorted. prefix need not end at a
// folder boundary: "a/chk-1" lists "a/chk-1/x" and "a/chk-10/x".
func (f *File) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	// Walk only the deepest folder that holds everything under prefix.
	base := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = prefix[:i]
	}
	if base != "" {
		if err := checkName(base); err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
	}
	var names []string
	err := filepath.WalkDir(f.path(base), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile, or never there
			}
			return err
		}
		if strings.HasPrefix(d.Name(), tempPrefix) || d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(f.root, p)
		if err != nil {
			return err
		}
		if name := filepath.ToSlash(rel); strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	slices.Sort(names)
	return names, nil
}

// Delete removes the object name, and the folders it leaves empty; a missing
// object is not an error.
func (f *File) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if err := os.Remove(f.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	// Prune empty folders up to the root; Remove fails on a non-empty one,
	// which ends the walk.
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if os.Remove(f.path(dir)) != nil {
			break
		}
		f.forget(f.path(dir))
	}
	return nil
}

// mkdirSynced makes dir and any missing parent below the root, and syncs
// the parent of each folder it made: an object's own sync and its
// folder's make the object's name durable, but not a new folder's name in
// its parent (ext4 and XFS happen to journal it with the file; POSIX does
// not say so). A checkpoint's folder is new at every checkpoint, and a
// manifest lost to a power failure after its transactions committed would
// have a restore write their output again.
//
// A folder another writer made (another process, or an upload of this one
// still under way) counts only once this File has synced its name itself:
// that writer may not have yet, or may have failed to, and an object of
// this writer's is durable only once the folder's name is.
func (f *File) mkdirSynced(dir string) error {
	if dir == f.root || f.isSynced(dir) {
		return nil // the root: NewFile's, as the folder it was given
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := f.mkdirSynced(parent); err != nil {
			return err
		}
	}
	switch err := os.Mkdir(dir, 0o755); {
	case errors.Is(err, fs.ErrNotExist):
		// A parent this File knew is gone (another process pruned it):
		// what it knows is stale. Forget it all, and make the folders
		// again.
		f.mu.Lock()
		f.synced = nil
		f.mu.Unlock()
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		return f.mkdirSynced(dir)
	case err != nil && !errors.Is(err, fs.ErrExist):
		return err
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	f.mu.Lock()
	if f.synced == nil || len(f.synced) >= maxSynced {
		f.synced = map[string]bool{}
	}
	f.synced[dir] = true
	f.mu.Unlock()
	return nil
}

func (f *File) isSynced(dir string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced[dir]
}

// forget drops dir from the folders known synced: it was removed.
func (f *File) forget(dir string) {
	f.mu.Lock()
	delete(f.synced, dir)
	f.mu.Unlock()
}

// syncDir syncs the folder dir (a variable: tests watch it).
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader stops a long copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
