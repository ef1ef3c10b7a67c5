package checkpoint

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestHolds: a hold is listed with the task's checkpoints, the first one
// written under a name is kept, it is read back whole, and releasing one
// leaves the others and the checkpoints.
func TestHolds(t *testing.T) {
	ctx := t.Context()
	for name, st := range map[string]Storage{"memory": NewMemory(MemoryOptions{}), "file": mustFile(t)} {
		t.Run(name, func(t *testing.T) {
			if err := st.PutIfAbsent(ctx, ManifestName("j", 3, 7), []byte("{}")); err != nil {
				t.Fatal(err)
			}
			first := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
			for _, h := range []Hold{{Name: "b", Time: first, Reason: "first"}, {Name: "b", Reason: "second"}, {Name: "a", Reason: "other"}} {
				if err := PutHold(ctx, st, "j", 3, h); err != nil {
					t.Fatal(err)
				}
			}
			if err := PutHold(ctx, st, "j", 3, Hold{Name: "x/y"}); err == nil {
				t.Fatal("a hold named x/y was written")
			}
			l, err := ListTask(ctx, st, "j", 3)
			if err != nil || !slices.Equal(l.Holds, []string{"a", "b"}) || !slices.Equal(l.Completed, []ID{7}) {
				t.Fatalf("listing: %+v, %v", l, err)
			}
			hs, err := ReadHolds(ctx, st, "j", 3, l.Holds)
			if err != nil || len(hs) != 2 || hs[1].Reason != "first" || !hs[1].Time.Equal(first) || hs[0].Time.IsZero() {
				t.Fatalf("holds: %+v, %v; want b's first reason and time kept", hs, err)
			}
			if other, err := Holds(ctx, st, "j", 4); err != nil || len(other) != 0 {
				t.Fatalf("task 4's holds: %+v, %v", other, err)
			}
			if err := ReleaseHold(ctx, st, "j", 3, "b"); err != nil {
				t.Fatal(err)
			}
			if err := ReleaseHold(ctx, st, "j", 3, "b"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second release: %v, want ErrNotFound", err)
			}
			// A hold released between a listing and its read is left out.
			hs, err = ReadHolds(ctx, st, "j", 3, l.Holds)
			if err != nil || len(hs) != 1 || hs[0].Name != "a" {
				t.Fatalf("after the release: %+v, %v", hs, err)
			}
			if l, err = ListTask(ctx, st, "j", 3); err != nil || !slices.Equal(l.Holds, []string{"a"}) || !slices.Equal(l.Completed, []ID{7}) {
				t.Fatalf("listing after the release: %+v, %v", l, err)
			}
		})
	}
}
