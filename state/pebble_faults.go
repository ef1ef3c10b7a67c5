package state

import (
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// DiskFaults injects disk errors into the Pebble stores opened with it
// (PebbleOptions.Faults): a testing hook for chaos runs and for tests of
// failed checkpoints, never meant for production. A control file says
// which fault is on, and is read again at most every FaultPollInterval
// while the stores touch the disk:
//
//	enospc    every create, write, sync, rename, link and mkdir fails with
//	          an error wrapping syscall.ENOSPC ("no space left on device")
//	eio       those and every read fail with syscall.EIO
//	empty, or no file: no faults
//
// The faults cover what the stores do under their directories: Pebble's
// own file operations, and a snapshot's reads for its upload, a restore's
// downloads and hard links.
type DiskFaults struct {
	path string
	log  *slog.Logger
	// only, if set, limits the faults to the operations it accepts (tests
	// aim at one file, such as Pebble's MANIFEST).
	only func(errorfs.Op) bool

	mu     sync.Mutex // held while reading the control file
	readAt atomic.Int64
	mode   atomic.Int32
	warned string // the last unknown content logged
}

// FaultPollInterval is how often DiskFaults reads its control file at most.
const FaultPollInterval = 100 * time.Millisecond

// Fault modes, as written in the control file.
const (
	FaultNone   = ""
	FaultENOSPC = "enospc"
	FaultEIO    = "eio"
)

const (
	modeNone int32 = iota
	modeENOSPC
	modeEIO
)

// NewDiskFaults returns faults controlled by the file at controlFile. log,
// if not nil, hears when the fault changes.
func NewDiskFaults(controlFile string, log *slog.Logger) *DiskFaults {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &DiskFaults{path: controlFile, log: log}
	f.Reload()
	return f
}

// Reload reads the control file now, rather than when the poll interval has
// passed, and returns the fault it names.
func (f *DiskFaults) Reload() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.read()
	return modeName(f.mode.Load())
}

// current returns the fault on now, reading the control file if the last
// read is older than the poll interval. One goroutine reads; the others go
// on with the fault read last.
func (f *DiskFaults) current() int32 {
	if time.Now().UnixNano()-f.readAt.Load() >= int64(FaultPollInterval) && f.mu.TryLock() {
		f.read()
		f.mu.Unlock()
	}
	return f.mode.Load()
}

// read reads the control file; f.mu is held.
func (f *DiskFaults) read() {
	f.readAt.Store(time.Now().UnixNano())
	b, err := os.ReadFile(f.path)
	content := strings.ToLower(strings.TrimSpace(string(b)))
	if err != nil {
		content = FaultNone // absent (or unreadable): no faults
	}
	var m int32
	switch content {
	case FaultNone:
		m = modeNone
	case FaultENOSPC:
		m = modeENOSPC
	case FaultEIO:
		m = modeEIO
	default:
		if f.warned != content {
			f.warned = content
			f.log.Error("disk faults: unknown content in the control file, want enospc, eio or nothing; no faults", "file", f.path, "content", content)
		}
		m = modeNone
	}
	if old := f.mode.Swap(m); old != m {
		f.log.Warn("disk faults (testing hook)", "file", f.path, "fault", modeName(m), "was", modeName(old))
	}
}

func modeName(m int32) string {
	switch m {
	case modeENOSPC:
		return FaultENOSPC
	case modeEIO:
		return FaultEIO
	}
	return "none"
}

// String implements errorfs.Injector.
func (f *DiskFaults) String() string { return "weir disk faults " + f.path }

// MaybeError implements errorfs.Injector: the error op fails with now, nil
// if none. Removing files and closing them never fail: both work on a full
// disk, and freeing space is how a store recovers.
func (f *DiskFaults) MaybeError(op errorfs.Op) error {
	if f == nil {
		return nil
	}
	m := f.current()
	if m == modeNone || (f.only != nil && !f.only(op)) {
		return nil
	}
	errno := syscall.ENOSPC
	if m == modeEIO {
		errno = syscall.EIO
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpLink, errorfs.OpRename, errorfs.OpReuseForWrite, errorfs.OpMkdirAll,
		errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData,
		errorfs.OpFileSyncTo, errorfs.OpFileFlush, errorfs.OpFilePreallocate:
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		if m != modeEIO {
			return nil
		}
	default:
		return nil
	}
	return &fs.PathError{Op: opName(op.Kind), Path: op.Path, Err: errno}
}

func opName(k errorfs.OpKind) string {
	switch k {
	case errorfs.OpCreate:
		return "create"
	case errorfs.OpLink:
		return "link"
	case errorfs.OpRename:
		return "rename"
	case errorfs.OpReuseForWrite:
		return "reuse"
	case errorfs.OpMkdirAll:
		return "mkdir"
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return "sync"
	case errorfs.OpFileFlush:
		return "flush"
	case errorfs.OpFilePreallocate:
		return "fallocate"
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		return "read"
	}
	return "write"
}

// wrap returns base with the faults injected; base itself if f is nil.
func (f *DiskFaults) wrap(base vfs.FS) vfs.FS {
	if f == nil {
		return base
	}
	return errorfs.Wrap(base, f)
}

// check returns the error an operation of kind on path fails with now, for
// the file operations the stores make outside Pebble; nil if f is nil.
func (f *DiskFaults) check(kind errorfs.OpKind, path string) error {
	if f == nil {
		return nil
	}
	return f.MaybeError(errorfs.Op{Kind: kind, Path: path})
}

// reader returns r, failing its reads as f says; r itself if f is nil.
func (f *DiskFaults) reader(r io.Reader, path string) io.Reader {
	if f == nil {
		return r
	}
	return faultyReader{r: r, f: f, path: path}
}

type faultyReader struct {
	r    io.Reader
	f    *DiskFaults
	path string
}

func (r faultyReader) Read(p []byte) (int, error) {
	if err := r.f.check(errorfs.OpFileRead, r.path); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// faultyWriter fails its writes as faults say (nil: never).
type faultyWriter struct {
	w      io.Writer
	faults *DiskFaults
	path   string
}

func (w faultyWriter) Write(p []byte) (int, error) {
	if err := w.faults.check(errorfs.OpFileWrite, w.path); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}
