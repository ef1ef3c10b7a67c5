package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/diskfault"
)

// testFaults returns disk faults controlled by a file of the test, and a
// function that sets the fault at once.
func testFaults(t *testing.T) (*diskfault.Injector, func(mode string)) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "faults")
	f := diskfault.New(file, nil)
	return f, func(mode string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(mode+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := f.Reload(); got != mode && !(mode == "" && got == "none") {
			t.Fatalf("fault %q after writing %q", got, mode)
		}
	}
}

// tryCheckpoint snapshots b as checkpoint id and uploads it, returning the
// error of either step.
func tryCheckpoint(b Backend, st checkpoint.Storage, id checkpoint.ID) (checkpoint.StateHandle, error) {
	s, err := b.Snapshot(id)
	if err != nil {
		return checkpoint.StateHandle{}, err
	}
	defer s.Release()
	return s.Upload(context.Background(), st, fmt.Sprintf("chk-%d/op/", id), "shared/op/")
}

// TestPebbleDiskFaultFailsSnapshotNotStore: with the disk full (or
// failing), a snapshot fails with the disk's error, while reads and writes
// go on from memory; once the disk recovers, the next snapshot holds every
// write, those made during the fault included.
func TestPebbleDiskFaultFailsSnapshotNotStore(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		errno syscall.Errno
	}{{diskfault.ENOSPC, syscall.ENOSPC}, {diskfault.EIO, syscall.EIO}} {
		t.Run(tc.mode, func(t *testing.T) {
			faults, set := testFaults(t)
			opts := smallPebble
			opts.FS = faults.Wrap(vfs.Default)
			p := openTestPebble(t, opts)
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			v := mustValue(t, p, "v")
			fillValues(t, v, 0, 500, 100, "a")
			if _, err := tryCheckpoint(p, st, 1); err != nil {
				t.Fatal(err)
			}

			set(tc.mode)
			fillValues(t, v, 250, 1500, 100, "b") // more than a memtable: Pebble's own flushes fail too
			// A base snapshot, which needs the disk: a delta the value
			// caches held does not (TestPebbleDeltaHeldInMemory).
			p.dbWritten = true
			for id := checkpoint.ID(2); id <= 3; id++ {
				_, err := tryCheckpoint(p, st, id)
				if !errors.Is(err, tc.errno) {
					t.Fatalf("checkpoint %d during %s: %v, want an error wrapping %v", id, tc.mode, err, tc.errno)
				}
				if errors.Is(err, ErrBroken) {
					t.Fatalf("checkpoint %d: a failed flush broke the store: %v", id, err)
				}
				t.Logf("checkpoint %d: %v", id, err)
			}
			fillValues(t, v, 1400, 1600, 100, "c")
			want := readAll(t, p, 1600)
			if len(want) != 1600 {
				t.Fatalf("%d keys readable during the fault, want 1600", len(want))
			}

			set(diskfault.None)
			h, err := tryCheckpoint(p, st, 4)
			if err != nil {
				t.Fatalf("checkpoint after the fault cleared: %v", err)
			}
			q := restoreFresh(t, st, h, smallPebble)
			if got := readAll(t, q, 1600); !maps.Equal(got, want) {
				t.Fatalf("restored %d keys, want the %d written (during the fault too)", len(got), len(want))
			}
		})
	}
}

// TestPebbleFatalErrorBreaksStore: a MANIFEST write that fails is fatal to
// Pebble (its Logger.Fatalf, on its flush goroutine): the process goes on,
// the store refuses every later read of Pebble, write and snapshot with
// ErrBroken and the disk's error, even once the disk is fine, and closes. A new store in
// the same directory restores the last checkpoint.
func TestPebbleFatalErrorBreaksStore(t *testing.T) {
	for _, cut := range pebbleCuts {
		t.Run(cut.String(), func(t *testing.T) {
			faults, set := testFaults(t)
			faults.Only = func(op errorfs.Op) bool {
				// The DB's own MANIFEST, not a checkpoint's copy of it.
				return strings.HasPrefix(filepath.Base(filepath.Dir(op.Path)), "db-") && strings.HasPrefix(filepath.Base(op.Path), "MANIFEST")
			}
			opts := withCut(smallPebble, cut)
			opts.FS = faults.Wrap(vfs.Default)
			dir := t.TempDir()
			p, err := OpenPebble(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			v := mustValue(t, p, "v")
			fillValues(t, v, 0, 500, 100, "a")
			h1, err := tryCheckpoint(p, st, 1)
			if err != nil {
				t.Fatal(err)
			}
			want := readAll(t, p, 500)

			set(diskfault.ENOSPC)
			m := mustMap(t, p, "m")
			// Writes until a flush (the cut's or Pebble's own) writes the
			// MANIFEST; a map writes through to Pebble.
			var werr error
			for i := 0; werr == nil && i < 20_000; i++ {
				werr = m.Put(k(i), k(i), make([]byte, 100))
				if i%1000 == 999 && werr == nil {
					_, werr = tryCheckpoint(p, st, checkpoint.ID(2+i/1000))
				}
			}
			if !errors.Is(werr, ErrBroken) || !errors.Is(werr, syscall.ENOSPC) {
				t.Fatalf("writes and checkpoints with the MANIFEST failing: %v, want ErrBroken wrapping ENOSPC", werr)
			}
			t.Logf("first error: %v", werr)

			set(diskfault.None)
			if _, err := tryCheckpoint(p, st, 100); !errors.Is(err, ErrBroken) {
				t.Errorf("checkpoint of the broken store after the fault cleared: %v, want ErrBroken", err)
			}
			// (Values a value table has cached are still served: the
			// task's own writes.)
			if _, _, err := m.Get(k(1), k(1)); !errors.Is(err, ErrBroken) {
				t.Errorf("read of the broken store: %v, want ErrBroken", err)
			}
			if err := m.Put(k(1), k(1), nil); !errors.Is(err, ErrBroken) {
				t.Errorf("write to the broken store: %v, want ErrBroken", err)
			}
			if err := p.Close(); err != nil {
				t.Logf("close of the broken store: %v", err)
			}

			q, err := OpenPebble(dir, smallPebble)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			mustValue(t, q, "v")
			if err := q.Restore(context.Background(), st, h1); err != nil {
				t.Fatalf("restore after the store broke: %v", err)
			}
			if got := readAll(t, q, 500); !maps.Equal(got, want) {
				t.Fatalf("restored %d keys, want %d", len(got), len(want))
			}
		})
	}
}

// TestPebbleFailingFlushesDoNotStall: while flushes fail, writes that would
// fill the memtables up to Pebble's write stall break the store instead: a
// stall would hold the task until the disk recovers, where it could neither
// fail nor stop.
func TestPebbleFailingFlushesDoNotStall(t *testing.T) {
	faults, set := testFaults(t)
	opts := smallPebble
	opts.FS = faults.Wrap(vfs.Default)
	p := openTestPebble(t, opts)
	m := mustMap(t, p, "m")
	set(diskfault.ENOSPC)
	stall := memTableStopWrites * smallPebble.MemTableSize
	var err error
	val := make([]byte, 1000)
	// A flush fails first: the store breaks before a stall once it knows
	// flushes fail. (Writes that fill every memtable before the first
	// flush has even tried would stall until one succeeds: on a loaded
	// machine the flush goroutine can start that late with memtables
	// this small.)
	if err := m.Put(k(-1), nil, val); err != nil {
		t.Fatal(err)
	}
	p.db.AsyncFlush()
	for deadline := time.Now().Add(30 * time.Second); p.health.writeErr() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no flush failed in 30s on a full disk")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; err == nil && int64(i*len(val)) < 4*stall; i++ {
		err = m.Put(k(i), nil, val)
	}
	if !errors.Is(err, ErrBroken) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "stall") {
		t.Fatalf("writes with failing flushes: %v, want ErrBroken wrapping ENOSPC, naming the stall", err)
	}
	t.Logf("%v", err)
}

// TestPebbleRestoreDiskFault: a restore onto a full disk fails with the
// disk's error and leaves the store as it was; once there is room it
// succeeds.
func TestPebbleRestoreDiskFault(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	src := openTestPebble(t, smallPebble)
	fillValues(t, mustValue(t, src, "v"), 0, 500, 100, "a")
	h := checkpointNow(t, src, st, 1)
	want := readAll(t, src, 500)

	faults, set := testFaults(t)
	opts := smallPebble
	opts.FS = faults.Wrap(vfs.Default)
	p := openTestPebble(t, opts)
	v := mustValue(t, p, "v")
	if err := v.Put(k(1), []byte("before")); err != nil {
		t.Fatal(err)
	}
	set(diskfault.ENOSPC)
	if err := p.Restore(context.Background(), st, h); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("restore onto a full disk: %v, want an error wrapping ENOSPC", err)
	}
	if got, _, err := v.Get(k(1)); err != nil || string(got) != "before" {
		t.Fatalf("after the failed restore: %q, %v; want the state as it was", got, err)
	}
	set(diskfault.None)
	if err := p.Restore(context.Background(), st, h); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, p, 500); !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
}
