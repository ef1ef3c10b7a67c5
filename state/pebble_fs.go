package state

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// noSyncFS is the local filesystem without fsync. The local DB is never the
// truth (the WAL, if any, is never synced, and a new backend never opens what
// an earlier one left on disk: state comes back from checkpoint storage, or
// from local files whose checksums match the checkpoint's), so durability
// of local files buys nothing, while every fsync of a flush, a compaction or
// a checkpoint lengthens the snapshot pause on a busy disk.
//
// It does not recycle WAL files either: recycling only saves fsync work, and
// a checkpoint copies a WAL file whole, so a recycled file's stale tail would
// be copied and uploaded with every checkpoint.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSync(fs.FS.Create(name, c))
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSync(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return noSync(fs.FS.OpenDir(name))
}

// ReuseForWrite declines to reuse, as its contract allows: it deletes
// oldname and creates newname empty.
func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.FS.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.Create(newname, c)
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func noSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                { return nil }
func (noSyncFile) SyncData() error            { return nil }
func (noSyncFile) SyncTo(int64) (bool, error) { return true, nil }

// failSlowly is fs whose failed creates are reported to h at once, and
// return after a pause. Pebble retries a failed flush at once, in a loop,
// until one succeeds (v2.1.7 has a TODO to back off): a disk that refuses
// new files, full or failing, would have it spin a core. The pause holds
// the loop to about a hundred tries a second, and the snapshots that wait
// for a try to that pause.
type failSlowly struct {
	vfs.FS
	h *dbHealth
}

// createFailPause is failSlowly's pause.
const createFailPause = 10 * time.Millisecond

func (fs failSlowly) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		fs.h.createFailed(err)
		time.Sleep(createFailPause)
	}
	return f, err
}

func (fs failSlowly) Unwrap() vfs.FS { return fs.FS }
