package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
