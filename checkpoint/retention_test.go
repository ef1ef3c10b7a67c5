package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// putCheckpoint writes a checkpoint of job j task 0: private files into its
// folder, shared ones under SharedDir (unless already there), and, when
// complete, its manifest.
func putCheckpoint(t *testing.T, st Storage, id ID, shared, private []string, complete bool) {
	t.Helper()
	ctx := context.Background()
	var refs []FileRef
	for _, s := range shared {
		name := SharedDir("j", 0) + s
		ref, err := PutFile(ctx, st, name, strings.NewReader(name))
		if err != nil {
			t.Fatal(err)
		}
		ref.Local, ref.Shared = s, true
		refs = append(refs, ref)
	}
	for _, p := range private {
		ref, err := PutFile(ctx, st, CheckpointDir("j", 0, id)+p, strings.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		ref.Local = p
		refs = append(refs, ref)
	}
	if !complete {
		return
	}
	b, err := EncodeManifest(Manifest{
		Version: FormatVersion, Job: "j", Task: 0, Checkpoint: id,
		Operators: []Ack{{Operator: "op", State: &StateHandle{Backend: "test", Files: refs}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, ManifestName("j", 0, id), b); err != nil {
		t.Fatal(err)
	}
}

func listAll(t *testing.T, st Storage) []string {
	t.Helper()
	names, err := st.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestRetainer(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	chk := func(id ID, rest string) string { return CheckpointDir("j", 0, id) + rest }
	sh := func(name string) string { return SharedDir("j", 0) + name }

	putCheckpoint(t, st, 1, []string{"a", "b"}, []string{"p"}, true)
	putCheckpoint(t, st, 2, []string{"a"}, []string{"p"}, false) // failed
	putCheckpoint(t, st, 3, []string{"a", "c"}, []string{"p"}, true)
	putCheckpoint(t, st, 4, []string{"c"}, []string{"p"}, true)
	putCheckpoint(t, st, 5, []string{"c"}, []string{"p"}, true)
	putCheckpoint(t, st, 6, []string{"c", "d"}, []string{"p"}, true)
	putCheckpoint(t, st, 7, []string{"e"}, []string{"p"}, false) // in progress
	putCheckpoint(t, st, 8, []string{"o"}, nil, false)           // only an orphan upload
	// Another task's objects and names this package does not write stay.
	if err := st.Put(ctx, "j/tasks/1/chk-00000000000000000001/x", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "j/tasks/0/chk-1/stray", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}

	r := NewRetainer(st, "j", 0, RetainOptions{Retained: 3})
	deleted, err := r.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		chk(1, "manifest.json"), chk(1, "p"), chk(2, "p"), chk(3, "manifest.json"), chk(3, "p"),
		sh("a"), sh("b"), // referenced by deleted manifests only
	}
	slices.Sort(want)
	if !reflect.DeepEqual(deleted, want) {
		t.Fatalf("first call deleted\n%q\nwant\n%q", deleted, want)
	}
	// e (in progress) and o (unknown origin) were never referenced: kept.
	for _, name := range []string{sh("c"), sh("d"), sh("e"), sh("o"), chk(7, "p"), "j/tasks/0/chk-1/stray"} {
		if _, err := st.Get(ctx, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// No new checkpoint: nothing more goes.
	if deleted, err := r.Retain(ctx); err != nil || len(deleted) != 0 {
		t.Fatalf("call without a new checkpoint deleted %q, %v", deleted, err)
	}

	// Checkpoint 7 completes with e; 8 failed, so o is garbage, and is
	// taken now that the newest checkpoint advanced past the call that
	// first saw it unreferenced.
	putCheckpoint(t, st, 7, []string{"c", "d", "e"}, nil, true)
	putCheckpoint(t, st, 9, []string{"f"}, nil, false) // in progress now
	deleted, err = r.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{chk(4, "manifest.json"), chk(4, "p"), sh("o")}
	slices.Sort(want)
	if !reflect.DeepEqual(deleted, want) {
		t.Fatalf("second call deleted\n%q\nwant\n%q", deleted, want)
	}

	// Ids at or below the newest in progress: no shared file goes, and
	// protected folders stay.
	putCheckpoint(t, st, 10, []string{"c"}, []string{"p"}, true)
	if deleted, err := r.Retain(ctx, 6, 5); err != nil || len(deleted) != 0 {
		t.Fatalf("call protecting 5 and 6 deleted %q, %v", deleted, err)
	}
	putCheckpoint(t, st, 11, []string{"c"}, nil, true)
	deleted, err = r.Retain(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{chk(5, "manifest.json"), chk(5, "p")}; !reflect.DeepEqual(deleted, want) {
		t.Fatalf("call protecting 6 deleted %q, want %q", deleted, want)
	}
	// f (of 9, which never completed) was last marked when 11 was newest:
	// it stays until a newer checkpoint completes.
	deleted, err = r.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{chk(6, "manifest.json"), chk(6, "p")}; !reflect.DeepEqual(deleted, want) {
		t.Fatalf("fifth call deleted %q, want %q", deleted, want)
	}
	putCheckpoint(t, st, 12, []string{"c"}, nil, true)
	deleted, err = r.Retain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{chk(7, "manifest.json"), chk(7, "p"), sh("d"), sh("e"), sh("f")}
	slices.Sort(want)
	if !reflect.DeepEqual(deleted, want) {
		t.Fatalf("sixth call deleted\n%q\nwant\n%q", deleted, want)
	}
	wantLeft := []string{
		sh("c"), chk(10, "manifest.json"), chk(10, "p"), chk(11, "manifest.json"), chk(12, "manifest.json"),
		"j/tasks/0/chk-1/stray", "j/tasks/1/chk-00000000000000000001/x",
	}
	slices.Sort(wantLeft)
	if got := listAll(t, st); !reflect.DeepEqual(got, wantLeft) {
		t.Fatalf("left\n%q\nwant\n%q", got, wantLeft)
	}
}

func TestRetainOneShot(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	putCheckpoint(t, st, 1, []string{"a", "b"}, []string{"p"}, true)
	putCheckpoint(t, st, 2, []string{"b"}, []string{"p"}, true)
	putCheckpoint(t, st, 3, []string{"orphan"}, nil, false)
	deleted, err := Retain(ctx, st, "j", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{SharedDir("j", 0) + "a", ManifestName("j", 0, 1), CheckpointDir("j", 0, 1) + "p"}
	if !reflect.DeepEqual(deleted, want) {
		t.Fatalf("deleted %q, want %q", deleted, want)
	}
	// A second one-shot call cannot tell the orphan from an upload in
	// progress either.
	if deleted, err := Retain(ctx, st, "j", 0, 1); err != nil || len(deleted) != 0 {
		t.Fatalf("second one-shot call deleted %q, %v", deleted, err)
	}
	// No completed checkpoint: nothing is judged.
	empty := NewMemory(MemoryOptions{})
	putCheckpoint(t, empty, 1, []string{"a"}, []string{"p"}, false)
	if deleted, err := Retain(ctx, empty, "j", 0, 1); err != nil || len(deleted) != 0 {
		t.Fatalf("without completed checkpoints deleted %q, %v", deleted, err)
	}
}

func TestRetainRefusesUnreadableManifest(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	putCheckpoint(t, st, 1, []string{"a"}, []string{"p"}, true)
	putCheckpoint(t, st, 2, []string{"b"}, []string{"p"}, true)
	if err := st.Put(ctx, ManifestName("j", 0, 2), strings.NewReader(`{"version":1,"sha256":"00","manifest":{}}`)); err != nil {
		t.Fatal(err)
	}
	before := listAll(t, st)
	deleted, err := Retain(ctx, st, "j", 0, 1)
	if !errors.Is(err, ErrCorrupt) || len(deleted) != 0 {
		t.Fatalf("Retain with a corrupt retained manifest: deleted %q, %v; want nothing and ErrCorrupt", deleted, err)
	}
	if after := listAll(t, st); !reflect.DeepEqual(after, before) {
		t.Fatalf("objects changed: %q -> %q", before, after)
	}
}

// countingGets is a Storage that counts the Gets of each object.
type countingGets struct {
	Storage
	gets map[string]int
}

func (c *countingGets) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	c.gets[name]++
	return c.Storage.Get(ctx, name)
}

// TestRetainerReadsEachManifestOnce: a long-lived Retainer reads a retained
// manifest from storage once, not at every call (an owner at 100 ms
// checkpoints calls every second, with Retained manifests to decode), and
// what it deletes is still by each manifest's references: the shared file
// only a dropped, remembered manifest referenced goes (rule 2a).
func TestRetainerReadsEachManifestOnce(t *testing.T) {
	ctx := context.Background()
	st := &countingGets{Storage: NewMemory(MemoryOptions{}), gets: map[string]int{}}
	r := NewRetainer(st, "j", 0, RetainOptions{Retained: 2})
	putCheckpoint(t, st, 1, []string{"a", "old"}, nil, true)
	for id := ID(2); id <= 6; id++ {
		putCheckpoint(t, st, id, []string{"a", "s" + fmt.Sprint(id)}, []string{"p"}, true)
		if _, err := r.Retain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range st.gets {
		if n != 1 {
			t.Errorf("%s read %d times, want once", name, n)
		}
	}
	want := []string{ManifestName("j", 0, 5), ManifestName("j", 0, 6)}
	for _, s := range []string{"a", "s5", "s6"} {
		want = append(want, SharedDir("j", 0)+s)
	}
	for _, id := range []ID{5, 6} {
		want = append(want, CheckpointDir("j", 0, id)+"p")
	}
	slices.Sort(want)
	if got := listAll(t, st); !reflect.DeepEqual(got, want) {
		t.Errorf("left\n%q, want\n%q", got, want)
	}
}

// TestRetainerTakesCompletedManifests: manifests the owner told the
// Retainer of (Completed, as the driver does) are never read back, also
// those written and dropped between two calls, and retention deletes by
// their references as it does by those it reads: the shared file only a
// dropped manifest referenced goes; those a retained one references stay.
func TestRetainerTakesCompletedManifests(t *testing.T) {
	ctx := context.Background()
	st := &countingGets{Storage: NewMemory(MemoryOptions{}), gets: map[string]int{}}
	r := NewRetainer(st, "j", 0, RetainOptions{Retained: 2})
	tell := func(id ID) {
		t.Helper()
		m, err := ReadManifest(ctx, st.Storage, "j", 0, id) // not through the counter
		if err != nil {
			t.Fatal(err)
		}
		r.Completed(m)
	}
	putCheckpoint(t, st, 1, []string{"a", "old"}, nil, true)
	tell(1)
	for id := ID(2); id <= 9; id++ {
		putCheckpoint(t, st, id, []string{"a", "s" + fmt.Sprint(id)}, []string{"p"}, true)
		tell(id)
		if id%3 == 0 { // three checkpoints a call: some written and dropped unseen
			if _, err := r.Retain(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A manifest of another task is not taken for this one's.
	r.Completed(Manifest{Job: "j", Task: 1, Checkpoint: 10})
	putCheckpoint(t, st, 10, []string{"a", "s10"}, nil, true)
	if _, err := r.Retain(ctx); err != nil {
		t.Fatal(err)
	}
	for name, n := range st.gets {
		if name != ManifestName("j", 0, 10) {
			t.Errorf("%s read %d times; the Retainer was told it", name, n)
		} else if n != 1 {
			t.Errorf("%s read %d times, want once (it was not told of it)", name, n)
		}
	}
	want := []string{ManifestName("j", 0, 9), ManifestName("j", 0, 10), CheckpointDir("j", 0, 9) + "p"}
	for _, s := range []string{"a", "s8", "s9", "s10"} {
		want = append(want, SharedDir("j", 0)+s)
	}
	slices.Sort(want)
	got := listAll(t, st)
	// s8 was last referenced by checkpoint 8, dropped at this call: rule 2a
	// deletes it.
	want = slices.DeleteFunc(want, func(n string) bool { return n == SharedDir("j", 0)+"s8" })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("left\n%q, want\n%q", got, want)
	}
}
