package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// testStorage is the contract every Storage meets.
func testStorage(t *testing.T, open func(t *testing.T) Storage) {
	ctx := context.Background()
	read := func(t *testing.T, st Storage, name string) string {
		t.Helper()
		rc, err := st.Get(ctx, name)
		if err != nil {
			t.Fatalf("Get %s: %v", name, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Run("put get replace", func(t *testing.T) {
		st := open(t)
		if err := st.Put(ctx, "a/b/c", strings.NewReader("one")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, st, "a/b/c"); got != "one" {
			t.Fatalf("got %q", got)
		}
		if err := st.Put(ctx, "a/b/c", strings.NewReader("two")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, st, "a/b/c"); got != "two" {
			t.Fatalf("after replace got %q", got)
		}
		if err := st.Put(ctx, "empty", strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, st, "empty"); got != "" {
			t.Fatalf("empty object read %q", got)
		}
	})

	t.Run("get missing", func(t *testing.T) {
		st := open(t)
		for _, name := range []string{"nope", "a/nope"} {
			if _, err := st.Get(ctx, name); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get %s: %v, want ErrNotFound", name, err)
			}
		}
		if err := st.Put(ctx, "a/b", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of a folder: %v, want ErrNotFound", err)
		}
	})

	t.Run("put if absent refuses a second write", func(t *testing.T) {
		st := open(t)
		name := ManifestName("j", 0, 1)
		if err := st.PutIfAbsent(ctx, name, []byte("first")); err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, name, []byte("second")); !errors.Is(err, ErrExists) {
			t.Fatalf("second PutIfAbsent: %v, want ErrExists", err)
		}
		if got := read(t, st, name); got != "first" {
			t.Fatalf("got %q after refused write", got)
		}
	})

	t.Run("put if absent races", func(t *testing.T) {
		st := open(t)
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = st.PutIfAbsent(ctx, "m", []byte{byte('0' + i)}) })
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("writers %d and %d both won", won, i)
			case err == nil:
				won = i
			case !errors.Is(err, ErrExists):
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		if won < 0 {
			t.Fatal("no writer won")
		}
		if got := read(t, st, "m"); got != string(rune('0'+won)) {
			t.Fatalf("object holds %q, winner was %d", got, won)
		}
	})

	t.Run("list sorted by prefix", func(t *testing.T) {
		st := open(t)
		for _, name := range []string{"j/tasks/1/chk-2/m", "j/tasks/10/chk-1/m", "j/tasks/1/chk-1/b", "j/tasks/1/chk-1/a", "j/shared/1/x", "k/y", "top"} {
			if err := st.Put(ctx, name, strings.NewReader(name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"j/tasks/1/", []string{"j/tasks/1/chk-1/a", "j/tasks/1/chk-1/b", "j/tasks/1/chk-2/m"}},
			{"j/tasks/1", []string{"j/tasks/1/chk-1/a", "j/tasks/1/chk-1/b", "j/tasks/1/chk-2/m", "j/tasks/10/chk-1/m"}},
			{"j/tasks/1/chk-1/a", []string{"j/tasks/1/chk-1/a"}},
			{"t", []string{"top"}},
			{"", []string{"j/shared/1/x", "j/tasks/1/chk-1/a", "j/tasks/1/chk-1/b", "j/tasks/1/chk-2/m", "j/tasks/10/chk-1/m", "k/y", "top"}},
			{"none/", nil},
			{"j/tasks/2", nil},
		} {
			got, err := st.List(ctx, tc.prefix)
			if err != nil {
				t.Fatalf("List %q: %v", tc.prefix, err)
			}
			if len(got) != 0 || len(tc.want) != 0 {
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("List %q = %q, want %q", tc.prefix, got, tc.want)
				}
			}
		}
	})

	t.Run("delete is idempotent", func(t *testing.T) {
		st := open(t)
		if err := st.Put(ctx, "d/x", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := st.Delete(ctx, "d/x"); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Delete(ctx, "never/was"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, "d/x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
		if names, err := st.List(ctx, ""); err != nil || len(names) != 0 {
			t.Fatalf("List after Delete = %q, %v", names, err)
		}
		// The folder Delete may have pruned can be written again.
		if err := st.Put(ctx, "d/y", strings.NewReader("y")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad names refused", func(t *testing.T) {
		st := open(t)
		for _, name := range []string{"", "/abs", "a/../../etc", "a//b", "dir/", "./a", "a/.tmp-x"} {
			if err := st.Put(ctx, name, strings.NewReader("x")); err == nil {
				t.Errorf("Put %q accepted", name)
			}
			if err := st.PutIfAbsent(ctx, name, []byte("x")); err == nil {
				t.Errorf("PutIfAbsent %q accepted", name)
			}
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		st := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := st.Put(cctx, "x", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put with cancelled context: %v", err)
		}
		if _, err := st.Get(ctx, "x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cancelled Put left an object: %v", err)
		}
	})
}

func TestMemoryStorage(t *testing.T) {
	testStorage(t, func(*testing.T) Storage { return NewMemory(MemoryOptions{}) })
}

func TestFileStorage(t *testing.T) {
	testStorage(t, func(t *testing.T) Storage {
		st, err := NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

func TestFileStorageLeavesNoTempFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "a/m", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "a/m", []byte("2")); !errors.Is(err, ErrExists) {
		t.Fatal(err)
	}
	failing := io.MultiReader(strings.NewReader("partial"), errReader{errors.New("disk on fire")})
	if err := st.Put(ctx, "a/n", failing); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Put from a failing reader: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"m"}) {
		t.Fatalf("folder holds %q, want only m", names)
	}
}

// TestFileStorageSyncsNewFolders: writing into folders that do not exist
// yet syncs the parent of each folder made, so that the new names survive
// a power failure with the object, and the object's own folder; an
// existing folder's parent is not synced again.
func TestFileStorageSyncsNewFolders(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var synced []string
	orig := syncDir
	syncDir = func(d string) error {
		mu.Lock()
		rel, _ := filepath.Rel(dir, d)
		synced = append(synced, filepath.ToSlash(rel))
		mu.Unlock()
		return orig(d)
	}
	t.Cleanup(func() { syncDir = orig })
	check := func(what string, want ...string) {
		t.Helper()
		mu.Lock()
		got := slices.Clone(synced)
		synced = synced[:0]
		mu.Unlock()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: synced %q, want %q", what, got, want)
		}
	}
	if err := st.PutIfAbsent(ctx, "job/task-0/chk-1/manifest", []byte("m")); err != nil {
		t.Fatal(err)
	}
	check("three new folders", ".", "job", "job/task-0", "job/task-0/chk-1")
	if err := st.Put(ctx, "job/task-0/chk-2/state", strings.NewReader("s")); err != nil {
		t.Fatal(err)
	}
	check("one new folder", "job/task-0", "job/task-0/chk-2")
	if err := st.Put(ctx, "job/task-0/chk-2/more", strings.NewReader("s")); err != nil {
		t.Fatal(err)
	}
	check("no new folder", "job/task-0/chk-2")
	// Once concurrent writers into one new folder have returned, its
	// parent was synced (by the one that made it).
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := st.Put(ctx, fmt.Sprintf("job/task-1/chk-1/o%d", i), strings.NewReader("x")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	n := 0
	for _, d := range synced {
		if d == "job" {
			n++
		}
	}
	mu.Unlock()
	if n == 0 {
		t.Fatalf("concurrent writers into a new folder: its parent never synced (%q)", synced)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestMemoryObjectTooLarge(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{MaxObjectSize: 10})
	name := "orders/tasks/0/chk-00000000000000000001/count-by-user/state-counts"
	err := st.Put(ctx, name, bytes.NewReader(make([]byte, 25)))
	var tooLarge *ObjectTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("Put over the limit: %v, want *ObjectTooLargeError", err)
	}
	if *tooLarge != (ObjectTooLargeError{Name: name, Size: 25, Limit: 10}) {
		t.Fatalf("error = %+v", *tooLarge)
	}
	for _, want := range []string{"count-by-user/state-counts", "25 bytes", "limit of 10 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if err := st.PutIfAbsent(ctx, "m", make([]byte, 11)); !errors.As(err, &tooLarge) {
		t.Fatalf("PutIfAbsent over the limit: %v", err)
	}
	if err := st.Put(ctx, "ok", bytes.NewReader(make([]byte, 10))); err != nil {
		t.Fatalf("Put at the limit: %v", err)
	}
	if err := NewMemory(MemoryOptions{}).Put(ctx, "big", bytes.NewReader(make([]byte, DefaultMaxObjectSize+1))); !errors.As(err, &tooLarge) {
		t.Fatalf("default limit not applied: %v", err)
	}
	if err := NewMemory(MemoryOptions{MaxObjectSize: -1}).Put(ctx, "big", bytes.NewReader(make([]byte, DefaultMaxObjectSize+1))); err != nil {
		t.Fatalf("unlimited: %v", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	for _, tc := range []struct {
		uri     string
		wantDir string // File's root; "" for Memory
		wantErr string
	}{
		{uri: "memory"},
		{uri: "memory://"},
		{uri: "file://" + filepath.Join(dir, "abs"), wantDir: filepath.Join(dir, "abs")},
		{uri: "file://rel/path", wantDir: filepath.Join(dir, "rel", "path")},
		{uri: "file://", wantErr: "needs a path"},
		{uri: "s3://", wantErr: "needs a bucket"},
		{uri: "gs://bucket", wantErr: "unknown scheme"},
		{uri: "/var/lib/weir", wantErr: "unknown scheme"},
	} {
		st, err := Open(ctx, tc.uri)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.uri) {
				t.Errorf("Open(%q) error %v, want one naming the URI and saying %q", tc.uri, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tc.uri, err)
			continue
		}
		switch st := st.(type) {
		case *Memory:
			if tc.wantDir != "" {
				t.Errorf("Open(%q) gave memory storage", tc.uri)
			}
		case *File:
			if st.Dir() != tc.wantDir {
				t.Errorf("Open(%q) dir %s, want %s", tc.uri, st.Dir(), tc.wantDir)
			}
		}
	}
}

func TestPutFileGetVerified(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	data := bytes.Repeat([]byte("state "), 1000)
	ref, err := PutFile(ctx, st, "j/shared/0/a.sst", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Size != int64(len(data)) || len(ref.CRC32C) != 8 || ref.Name != "j/shared/0/a.sst" {
		t.Fatalf("ref = %+v", ref)
	}
	got, err := ReadVerified(ctx, st, ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadVerified: %v", err)
	}

	for _, tc := range []struct {
		name   string
		stored []byte
		want   string
	}{
		{"bit flipped", append([]byte("x"), data[1:]...), "crc32c"},
		{"truncated", data[:len(data)-1], "bytes, expected"},
		{"longer", append(bytes.Clone(data), '!'), "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := st.Put(ctx, ref.Name, bytes.NewReader(tc.stored)); err != nil {
				t.Fatal(err)
			}
			_, err := ReadVerified(ctx, st, ref)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ref.Name) {
				t.Fatalf("error %v: want ErrCorrupt naming the file and saying %q", err, tc.want)
			}
		})
	}
	if _, err := GetVerified(ctx, st, FileRef{Name: "missing", CRC32C: "00000000"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetVerified missing: %v", err)
	}
	if _, err := GetVerified(ctx, st, FileRef{Name: ref.Name, Size: ref.Size}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no checksum") {
		t.Fatalf("GetVerified without a checksum: %v", err)
	}
}

// TestGetVerifiedSHA256 reads references as versions before CRC-32C wrote
// them, with a SHA-256.
func TestGetVerifiedSHA256(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	data := []byte("state written by an earlier version")
	if err := st.Put(ctx, "f", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	ref := FileRef{Name: "f", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	if got, err := ReadVerified(ctx, st, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadVerified = %q, %v", got, err)
	}
	ref.SHA256 = strings.Repeat("0", 64)
	if _, err := ReadVerified(ctx, st, ref); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("ReadVerified with a wrong SHA-256: %v", err)
	}
}

// TestFileStorageSyncsAFolderAnotherWriterMade: a writer that finds its
// object's folder made by another (here an upload still syncing the new
// folder's name into its parent) syncs that name itself before its object
// counts as written: the other writer may not have yet, or may fail to, and
// a manifest whose folder's name a power failure loses had its
// transactions committed all the same.
func TestFileStorageSyncsAFolderAnotherWriterMade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "job/tasks/0/owner-1", []byte("c")); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(dir, "job/tasks/0")
	var mu sync.Mutex
	parentSynced := false
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	orig := syncDir
	syncDir = func(d string) error {
		if d == parent {
			if first.CompareAndSwap(false, true) { // the upload's sync waits
				close(entered)
				<-release
			}
			mu.Lock()
			parentSynced = true
			mu.Unlock()
		}
		return orig(d)
	}
	t.Cleanup(func() { syncDir = orig })
	upload := make(chan error)
	go func() { upload <- st.Put(ctx, "job/tasks/0/chk-7/state", strings.NewReader("s")) }()
	<-entered // the upload made chk-7 and has not synced its name
	err = st.PutIfAbsent(ctx, "job/tasks/0/chk-7/manifest.json", []byte("m"))
	mu.Lock()
	synced := parentSynced
	mu.Unlock()
	close(release) // the upload ends, whatever the manifest's write did
	if uerr := <-upload; err == nil {
		err = uerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if !synced {
		t.Fatal("the manifest was written while chk-7's name in its parent was synced by no one")
	}
}

// TestFileStorageWritesAfterAnotherPrunedItsFolders: a folder this File
// made and synced, then removed by another process (its Delete prunes the
// folders it empties), is made again by the next write, not taken for
// still there.
func TestFileStorageWritesAfterAnotherPrunedItsFolders(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "job/tasks/0/chk-1/manifest.json", []byte("m")); err != nil {
		t.Fatal(err)
	}
	other, err := NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(ctx, "job/tasks/0/chk-1/manifest.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "job")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the other File's Delete left job/ (%v): the test tests nothing", err)
	}
	if err := st.PutIfAbsent(ctx, "job/tasks/0/chk-2/manifest.json", []byte("m")); err != nil {
		t.Fatalf("write after the folders were pruned by another: %v", err)
	}
	rc, err := st.Get(ctx, "job/tasks/0/chk-2/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || string(got) != "m" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestFileWritesIntoAFolderAnotherPruned: a folder this File made and
// synced, then removed by another process (its retention pruning an empty
// folder), is made again for the next write; the write failed for good,
// this File taking the folder for made.
func TestFileWritesIntoAFolderAnotherPruned(t *testing.T) {
	root := t.TempDir()
	f, err := NewFile(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := f.Put(ctx, "job/shared/0/op/inst/a", strings.NewReader("a")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"job/shared/0/op/inst", "job/shared/0/op"} {
		if err := os.RemoveAll(filepath.Join(root, filepath.FromSlash(dir))); err != nil {
			t.Fatal(err)
		}
		if err := f.Put(ctx, "job/shared/0/op/inst/b", strings.NewReader("b")); err != nil {
			t.Fatalf("put after %s was pruned: %v", dir, err)
		}
	}
}

// TestNamesStorageKeepsAsTheyAre: S3 lists names in XML, which has no
// place for control characters or bytes that are not UTF-8: a server
// answered U+FFFD in their place, and retention deleted names that did
// not exist while the objects stayed, and a restore found no
// checkpoint. Such a name is refused by every storage.
func TestNamesStorageKeepsAsTheyAre(t *testing.T) {
	for _, name := range []string{"job/a\x01b/obj", "job/a\x1bb/obj", "job/a\xffb/obj", "job/a\ufffeb/obj", "job/a\u0085b/obj"} {
		if err := checkName(name); err == nil {
			t.Errorf("checkName(%q) = nil, want it refused", name)
		}
	}
	for _, name := range []string{"job/é+%?#&<>~;*'\"/obj", "job/a\u2028b/obj", "job/日本/obj"} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q) = %v, want it kept", name, err)
		}
	}
}
