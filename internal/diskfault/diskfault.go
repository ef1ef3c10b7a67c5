// Package diskfault makes a filesystem fail the way a full or failing disk
// does, on demand: tests and the chaos runner's workers wrap the filesystem
// of the Pebble stores (state.PebbleOptions.FS, worker.Options.StateFS) with
// an [Injector] and switch faults on and off by writing its control file.
//
// It is a test harness: production code never imports it. Tests do, and so
// does cmd/processor when built with the weirfaults build tag, the worker
// binary of the chaos runner (see cmd/processor/statefaults_weirfaults.go).
//
// The control file names the fault on, and is read again at most every
// [PollInterval] while the filesystem is used:
//
//	enospc    every create, write, sync, rename, link and mkdir fails with
//	          an error wrapping syscall.ENOSPC ("no space left on device")
//	eio       those and every read fail with syscall.EIO
//	empty, or no file: no faults
//
// Removing and closing files never fail: both work on a full disk, and
// freeing space is how a store recovers.
package diskfault

import (
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

// PollInterval is how often an Injector reads its control file at most.
const PollInterval = 100 * time.Millisecond

// Faults, as written in the control file.
const (
	None   = ""
	ENOSPC = "enospc"
	EIO    = "eio"
)

const (
	modeNone int32 = iota
	modeENOSPC
	modeEIO
)

// Injector is an errorfs.Injector whose fault a control file switches.
// It is safe for concurrent use.
type Injector struct {
	path string
	log  *slog.Logger
	// Only, if set before the Injector is used, limits the faults to the
	// operations it accepts (tests aim at one file, such as Pebble's
	// MANIFEST).
	Only func(errorfs.Op) bool

	mu     sync.Mutex // held while reading the control file
	readAt atomic.Int64
	mode   atomic.Int32
	warned string // the last unknown content logged
}

// New returns an Injector controlled by the file at controlFile, which
// need not exist yet. log, if not nil, hears when the fault changes.
func New(controlFile string, log *slog.Logger) *Injector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Injector{path: controlFile, log: log}
	f.Reload()
	return f
}

// Wrap returns base failing as f says.
func (f *Injector) Wrap(base vfs.FS) vfs.FS { return errorfs.Wrap(base, f) }

// Reload reads the control file now, rather than when the poll interval has
// passed, and returns the fault it names ("none" for none).
func (f *Injector) Reload() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.read()
	return modeName(f.mode.Load())
}

// current returns the fault on now, reading the control file if the last
// read is older than the poll interval. One goroutine reads; the others go
// on with the fault read last.
func (f *Injector) current() int32 {
	if time.Now().UnixNano()-f.readAt.Load() >= int64(PollInterval) && f.mu.TryLock() {
		f.read()
		f.mu.Unlock()
	}
	return f.mode.Load()
}

// read reads the control file; f.mu is held.
func (f *Injector) read() {
	f.readAt.Store(time.Now().UnixNano())
	b, err := os.ReadFile(f.path)
	content := strings.ToLower(strings.TrimSpace(string(b)))
	if err != nil {
		content = None // absent (or unreadable): no faults
	}
	var m int32
	switch content {
	case None:
		m = modeNone
	case ENOSPC:
		m = modeENOSPC
	case EIO:
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
		return ENOSPC
	case modeEIO:
		return EIO
	}
	return "none"
}

// String implements errorfs.Injector.
func (f *Injector) String() string { return "weir disk faults " + f.path }

// MaybeError implements errorfs.Injector: the error op fails with now, nil
// if none.
func (f *Injector) MaybeError(op errorfs.Op) error {
	m := f.current()
	if m == modeNone || (f.Only != nil && !f.Only(op)) {
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

// FromEnv returns the local disk failing as the control file named by the
// environment variable env says, or nil if env is unset or empty; lookup
// reads the environment (os.LookupEnv). What a worker process does whose
// disk faults another process switches (the chaos runner's workers).
func FromEnv(env string, lookup func(string) (string, bool), log *slog.Logger) vfs.FS {
	file, ok := lookup(env)
	if !ok || file == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Warn("disk fault injection is on (a test build): the Pebble stores fail as the control file says", "env", env, "file", file)
	return New(file, log.With("component", "faults")).Wrap(vfs.Default)
}
