package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// reuseKeys is how many 1000-byte values a reuse fixture holds (1 MB, four
// memtables of smallPebble).
const reuseKeys = 1000

// reuseFixture is a checkpoint of a backend in dir, which is then closed or
// killed, leaving its DB in dbDir.
type reuseFixture struct {
	dir   string
	dbDir string
	st    *checkpoint.File
	h     checkpoint.StateHandle
	want  map[string]string
}

// newReuseFixture checkpoints a backend whose LSM holds one large file at the
// bottom and three small ones in L0 (too few to start a compaction), so that
// every SST of the checkpoint is still in its DB when it ends. kill ends it
// as a killed process would: the DB is not closed through the backend.
func newReuseFixture(t *testing.T, kill bool) reuseFixture {
	t.Helper()
	ctx := context.Background()
	fx := reuseFixture{dir: t.TempDir()}
	var err error
	if fx.st, err = checkpoint.NewFile(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPebble(fx.dir, smallPebble)
	if err != nil {
		t.Fatal(err)
	}
	v := mustValue(t, p, "v")
	fillValues(t, v, 0, reuseKeys, 1000, "a")
	if err := p.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		t.Fatal(err)
	}
	if err := p.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		fillValues(t, v, i*100, i*100+50, 1000, fmt.Sprint("b", i))
		if err := p.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
			t.Fatal(err)
		}
		if err := p.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	fx.h = checkpointNow(t, p, fx.st, 1)
	fx.want = readAll(t, p, reuseKeys)
	fx.dbDir = p.dbDir
	if kill {
		p.db.Close()
		p.lock.Close() // the end of the process releases it
	} else if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(fx.shared()) < 4 {
		t.Fatalf("the fixture's checkpoint has %d SSTs, want 4 or more", len(fx.shared()))
	}
	return fx
}

// shared returns the shared files of the checkpoint, smallest first.
func (fx reuseFixture) shared() []checkpoint.FileRef {
	var out []checkpoint.FileRef
	for _, f := range fx.h.Files {
		if isShared(f.Local) {
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b checkpoint.FileRef) int { return int(a.Size - b.Size) })
	return out
}

// syncBuffer is a log destination that restore goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPebbleRestoreReusesLocalFiles restores a checkpoint with a new backend
// in the directory of the one that took it: the SSTs still there are linked,
// not downloaded, unless they are damaged or gone; in a fresh directory
// everything is downloaded. The restored state is the checkpoint's either way.
func TestPebbleRestoreReusesLocalFiles(t *testing.T) {
	tests := []struct {
		name string
		kill bool
		// damage changes the fixture's local files before the restore and
		// returns the shared files it made unusable.
		damage func(t *testing.T, fx reuseFixture) []checkpoint.FileRef
		fresh  bool // restore in another directory
	}{
		{name: "closed backend"},
		{name: "killed process", kill: true},
		{name: "corrupted SST", damage: func(t *testing.T, fx reuseFixture) []checkpoint.FileRef {
			victim := fx.shared()[0]
			path := filepath.Join(fx.dbDir, victim.Local)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return []checkpoint.FileRef{victim}
		}},
		{name: "missing SST", damage: func(t *testing.T, fx reuseFixture) []checkpoint.FileRef {
			victim := fx.shared()[1]
			if err := os.Remove(filepath.Join(fx.dbDir, victim.Local)); err != nil {
				t.Fatal(err)
			}
			return []checkpoint.FileRef{victim}
		}},
		{name: "truncated SST", damage: func(t *testing.T, fx reuseFixture) []checkpoint.FileRef {
			victim := fx.shared()[2]
			if err := os.Truncate(filepath.Join(fx.dbDir, victim.Local), victim.Size/2); err != nil {
				t.Fatal(err)
			}
			return []checkpoint.FileRef{victim}
		}},
		{name: "fresh directory", fresh: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newReuseFixture(t, tt.kill)
			var bad []checkpoint.FileRef
			if tt.damage != nil {
				bad = tt.damage(t, fx)
			}
			var wantReused int
			var wantReusedBytes int64
			if !tt.fresh {
				for _, f := range fx.shared() {
					if !slices.Contains(bad, f) {
						wantReused++
						wantReusedBytes += f.Size
					}
				}
			}
			dir := fx.dir
			if tt.fresh {
				dir = t.TempDir()
			}
			var logs syncBuffer
			opts := smallPebble
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			q, err := OpenPebble(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			mustValue(t, q, "v")
			if err := q.Restore(context.Background(), fx.st, fx.h); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, q, reuseKeys); !maps.Equal(got, fx.want) {
				t.Errorf("restored %d keys unlike the checkpoint's %d", len(got), len(fx.want))
			}
			s := q.LastRestore()
			if s.Files != len(fx.h.Files) || s.Reused != wantReused || s.ReusedBytes != wantReusedBytes ||
				s.DownloadedBytes != fx.h.Size-wantReusedBytes || s.Took <= 0 {
				t.Errorf("LastRestore() = %+v; want %d files, %d reused, %d bytes reused, %d downloaded",
					s, len(fx.h.Files), wantReused, wantReusedBytes, fx.h.Size-wantReusedBytes)
			}
			if !tt.fresh && s.ReusedBytes*2 < fx.h.Size {
				t.Errorf("reused %d of %d bytes, want most", s.ReusedBytes, fx.h.Size)
			}
			line := fmt.Sprintf(`level=INFO msg="pebble restore" instance=%s files=%d reused=%d reused_bytes=%d downloaded_bytes=%d took=`,
				q.Instance(), s.Files, s.Reused, s.ReusedBytes, s.DownloadedBytes)
			if n := strings.Count(logs.String(), `msg="pebble restore"`); n != 1 || !strings.Contains(logs.String(), line) {
				t.Errorf("log has %d restore lines, want one like %s:\n%s", n, line, logs.String())
			}
			if strings.Contains(tt.name, "corrupted") && !strings.Contains(logs.String(), "does not match the checkpoint") {
				t.Errorf("a corrupt local copy went unreported:\n%s", logs.String())
			}
		})
	}
}

// TestPebbleRestoreReusesRestoredFiles follows a task around: restored on a
// fresh directory, it runs and checkpoints (mostly files the first owner
// uploaded), then restores that checkpoint on its own directory (a restart)
// and on its own live DB: the files a restore laid out are reused too.
func TestPebbleRestoreReusesRestoredFiles(t *testing.T) {
	ctx := context.Background()
	fx := newReuseFixture(t, false)
	dir := t.TempDir()
	q, err := OpenPebble(dir, smallPebble)
	if err != nil {
		t.Fatal(err)
	}
	qv := mustValue(t, q, "v")
	if err := q.Restore(ctx, fx.st, fx.h); err != nil {
		t.Fatal(err)
	}
	if s := q.LastRestore(); s.Reused != 0 || s.DownloadedBytes != fx.h.Size {
		t.Fatalf("restore on a fresh directory: %+v", s)
	}
	fillValues(t, qv, 0, 10, 1000, "q")
	h2 := checkpointNow(t, q, fx.st, 2)
	want := readAll(t, q, reuseKeys)
	var inherited, shared int64
	for _, f := range h2.Files {
		if isShared(f.Local) {
			shared += f.Size
			if !strings.Contains(f.Name, "/"+q.Instance()+"/") {
				inherited += f.Size
			}
		}
	}
	if inherited*2 < h2.Size {
		t.Fatalf("checkpoint 2 holds %d bytes of files restored, of %d: the test needs most", inherited, h2.Size)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := OpenPebble(dir, smallPebble)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rv := mustValue(t, r, "v")
	for _, step := range []string{"restart", "same backend"} {
		if err := r.Restore(ctx, fx.st, h2); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if s := r.LastRestore(); s.ReusedBytes != shared || s.DownloadedBytes != h2.Size-shared {
			t.Errorf("%s: LastRestore() = %+v; want all %d bytes of SSTs reused", step, s, shared)
		}
		if got := readAll(t, r, reuseKeys); !maps.Equal(got, want) {
			t.Errorf("%s: restored %d keys unlike checkpoint 2's %d", step, len(got), len(want))
		}
		fillValues(t, rv, 0, 10, 1000, "gone after the next restore")
	}
}

// TestPebbleStaleDirs checks that the DBs earlier backends left go once the
// new backend no longer needs them (after its Restore, failed or not, its
// first Snapshot, or Close), that its own DB stays after Close for the next
// backend, and that a failed restore keeps the current state.
func TestPebbleStaleDirs(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// act does something to q; it returns whether q's DB is still open.
		act func(t *testing.T, q *Pebble, fx reuseFixture) bool
	}{
		{"restore", func(t *testing.T, q *Pebble, fx reuseFixture) bool {
			if err := q.Restore(ctx, fx.st, fx.h); err != nil {
				t.Fatal(err)
			}
			return true
		}},
		{"failed restore", func(t *testing.T, q *Pebble, fx reuseFixture) bool {
			h := fx.h
			h.Files = slices.Clone(h.Files)
			for i, f := range h.Files {
				if !isShared(f.Local) {
					h.Files[i].Name += "-missing"
					break
				}
			}
			if err := q.Restore(ctx, fx.st, h); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("Restore with a missing file = %v", err)
			}
			return true
		}},
		{"first snapshot", func(t *testing.T, q *Pebble, fx reuseFixture) bool {
			s, err := q.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			s.Release()
			q.bg.Wait()
			return true
		}},
		{"close", func(t *testing.T, q *Pebble, fx reuseFixture) bool {
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			return false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newReuseFixture(t, false)
			q, err := OpenPebble(fx.dir, smallPebble)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			qv := mustValue(t, q, "v")
			qv.Put([]byte("mine"), []byte("kept"))
			if _, err := os.Stat(fx.dbDir); err != nil {
				t.Fatalf("the earlier DB is gone before anything happened: %v", err)
			}
			open := tt.act(t, q, fx)
			entries, _ := os.ReadDir(fx.dir)
			var got []string
			for _, e := range entries {
				if e.Name() != "snap" || !e.IsDir() {
					got = append(got, e.Name())
				}
			}
			if want := []string{filepath.Base(q.dbDir)}; !slices.Equal(got, want) {
				t.Errorf("directory holds %v; want %v", got, want)
			}
			if tt.name == "failed restore" {
				if got, ok, _ := qv.Get([]byte("mine")); !ok || string(got) != "kept" {
					t.Errorf("failed restore changed the state: %q %v", got, ok)
				}
			}
			if open {
				if err := qv.Put([]byte("k"), []byte("v")); err != nil {
					t.Errorf("the live DB broke: %v", err)
				}
			}
		})
	}
}

// TestPebbleLiveDirKept runs two backends in one directory at once (a task
// restarted while its last run still closes): the newer one reuses the
// older one's files but never deletes its DB.
func TestPebbleLiveDirKept(t *testing.T) {
	ctx := context.Background()
	st := newFakeStorage()
	dir := t.TempDir()
	a, err := OpenPebble(dir, smallPebble)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	av := mustValue(t, a, "v")
	fillValues(t, av, 0, 500, 1000, "a")
	if err := a.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		t.Fatal(err)
	}
	if err := a.db.Flush(); err != nil {
		t.Fatal(err)
	}
	h := checkpointNow(t, a, st, 1)

	var logs syncBuffer
	opts := smallPebble
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b, err := OpenPebble(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustValue(t, b, "v")
	if err := b.Restore(ctx, st, h); err != nil {
		t.Fatal(err)
	}
	if s := b.LastRestore(); s.Reused == 0 {
		t.Errorf("nothing reused from the live DB: %+v", s)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.dbDir); err != nil {
		t.Fatalf("the live DB's directory is gone: %v", err)
	}
	if !strings.Contains(logs.String(), "keep an earlier DB directory") {
		t.Errorf("keeping the live DB went unreported:\n%s", logs.String())
	}
	fillValues(t, av, 500, 600, 1000, "a")
	if err := a.flushValues(); err != nil { // the value caches' writes, into the DB the test works on
		t.Fatal(err)
	}
	if err := a.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, a, 600); len(got) != 600 {
		t.Errorf("the live DB reads %d keys, want 600", len(got))
	}
}
