package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir/worker/internal/status"
)

// maxStateSlots bounds the workers of one job that share a state directory
// on one host.
const maxStateSlots = 64

// lockStateDir takes the first free slot dir/w<k> (k from 0) by locking
// dir/w<k>.lock (flock, released by the kernel when the process dies, also
// on kill -9), and returns the slot's directory and the unlock function.
//
// Workers of one job on one host (several processes, or containers sharing
// a volume) must not share a local state directory: two owners of a task,
// for a moment during a hand-off, would open Pebble stores in the same
// place. A restarted worker usually gets its old slot back, and with it
// the files a restore can reuse instead of downloading them.
func lockStateDir(dir string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	for k := range maxStateSlots {
		slot := filepath.Join(dir, "w"+strconv.Itoa(k))
		f, err := os.OpenFile(slot+".lock", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return "", nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			continue
		}
		if err != nil {
			f.Close()
			return "", nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if err := os.MkdirAll(slot, 0o755); err != nil {
			f.Close()
			return "", nil, err
		}
		return slot, func() { f.Close() }, nil
	}
	return "", nil, fmt.Errorf("%s: all %d slots are locked by other workers", dir, maxStateSlots)
}

// cleanStates deletes, every so often until ctx ends, the local state of
// the tasks that left this worker more than delay ago (Kafka Streams'
// state.cleanup.delay.ms): a task that comes back within delay restores
// from its files on disk, one that does not frees the disk. A task's
// directory is deleted only while the runner does not run it, under
// startMu, which startTask holds to start one.
func (w *worker) cleanStates(ctx context.Context, dir string, delay time.Duration) {
	tick := time.NewTicker(min(delay/2, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.cleanPass(dir, delay)
	}
}

// cleanPass deletes once what cleanStates deletes.
func (w *worker) cleanPass(dir string, delay time.Duration) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "deleting-") {
			_ = os.RemoveAll(filepath.Join(dir, e.Name())) // an earlier pass was cut short
			continue
		}
		digits, ok := strings.CutPrefix(e.Name(), "task-")
		t, err := strconv.Atoi(digits)
		if !ok || err != nil || !e.IsDir() {
			continue
		}
		// Moved aside under startMu (a start waits for a rename, not for
		// gigabytes to be deleted), deleted after.
		path, doomed := filepath.Join(dir, e.Name()), ""
		w.startMu.Lock()
		if _, running := w.runner.Epoch(t); !running && w.leftAgo(t) > delay {
			doomed = filepath.Join(dir, "deleting-"+e.Name())
			if err := os.Rename(path, doomed); err != nil {
				w.log.Warn("delete the local state of a task that left", "task", t, "err", err)
				doomed = ""
			}
		}
		w.startMu.Unlock()
		if doomed == "" {
			continue
		}
		if err := os.RemoveAll(doomed); err != nil {
			w.log.Warn("delete the local state of a task that left", "task", t, "err", err)
		} else {
			w.log.Info("deleted the local state of a task that left this worker", "task", t, "after", delay)
		}
	}
}

// leftAgo is how long ago task t stopped here; for a task this process
// never ran (state a previous process left), how long this one runs.
func (w *worker) leftAgo(t int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.tasks[t]; s != nil {
		if s.State == status.Restoring || s.State == status.Running || s.State == status.Stopping {
			return 0
		}
		return time.Since(s.Since)
	}
	return time.Since(w.started)
}
