package checkpoint_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

func layoutOf(job string, topics ...checkpoint.TopicLayout) checkpoint.Layout {
	return checkpoint.Layout{Job: job, Created: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Topics: topics}
}

// TestLayoutRecord: an absent record reads as ErrNotFound; the first write
// wins and reads back as written; a second write is ErrExists and leaves
// the first in place.
func TestLayoutRecord(t *testing.T) {
	ctx := t.Context()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	if _, err := checkpoint.ReadLayout(ctx, st, "count"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("read of an absent record: %v, want ErrNotFound", err)
	}
	first := layoutOf("count", checkpoint.TopicLayout{Name: "in", ID: "AAAA", Partitions: 4})
	if err := checkpoint.WriteLayout(ctx, st, first); err != nil {
		t.Fatal(err)
	}
	second := layoutOf("count", checkpoint.TopicLayout{Name: "in", ID: "BBBB", Partitions: 8})
	if err := checkpoint.WriteLayout(ctx, st, second); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("second write: %v, want ErrExists", err)
	}
	got, err := checkpoint.ReadLayout(ctx, st, "count")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || got.Job != "count" || !got.Created.Equal(first.Created) || len(got.Topics) != 1 || got.Topics[0] != first.Topics[0] {
		t.Fatalf("read back %+v, want the first record %+v", got, first)
	}
	if _, err := checkpoint.ReadLayout(ctx, st, "other"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("another job's record: %v, want ErrNotFound", err)
	}
}

// TestLayoutRecordRace: workers that find no record write theirs at once;
// exactly one wins, and every other one learns so (ErrExists) and reads the
// winner's.
func TestLayoutRecordRace(t *testing.T) {
	ctx := t.Context()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			errs[i] = checkpoint.WriteLayout(ctx, st, layoutOf("job", checkpoint.TopicLayout{Name: "in", ID: string(rune('A' + i)), Partitions: 4}))
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both wrote the record", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, checkpoint.ErrExists):
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer wrote the record")
	}
	got, err := checkpoint.ReadLayout(ctx, st, "job")
	if err != nil {
		t.Fatal(err)
	}
	if want := string(rune('A' + won)); got.Topics[0].ID != want {
		t.Errorf("record has topic id %s, the winner wrote %s", got.Topics[0].ID, want)
	}
}

func TestLayoutRecordCorrupt(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct{ name, body, want string }{
		{"not json", "{", "corrupt"},
		{"other job", `{"version":1,"job":"other","topics":[]}`, `describes job "other"`},
		{"future version", `{"version":2,"job":"job","topics":[]}`, "unsupported format version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			if err := st.PutIfAbsent(ctx, checkpoint.LayoutName("job"), []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			_, err := checkpoint.ReadLayout(ctx, st, "job")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "job/layout.json") {
				t.Fatalf("got %v, want an error naming job/layout.json and %q", err, tc.want)
			}
		})
	}
}

// TestLayoutCompare: every changed topic is named with what changed, old
// and new; ids are compared only where both sides know them; topics only
// one side has are not compared.
func TestLayoutCompare(t *testing.T) {
	rec := layoutOf("job",
		checkpoint.TopicLayout{Name: "in", ID: "id-in", Partitions: 4},
		checkpoint.TopicLayout{Name: "job-by-word-repartition", ID: "id-rp", Partitions: 4},
		checkpoint.TopicLayout{Name: "old-input", ID: "id-old", Partitions: 2},
	)
	for _, tc := range []struct {
		name string
		live []checkpoint.TopicLayout
		kind checkpoint.ChangeKind
		want []string // in the error, in this order
	}{
		{name: "same", live: []checkpoint.TopicLayout{{Name: "in", ID: "id-in", Partitions: 4}, {Name: "job-by-word-repartition", ID: "id-rp", Partitions: 4}}},
		{name: "unknown ids are not compared", live: []checkpoint.TopicLayout{{Name: "in", Partitions: 4}}},
		{name: "a topic the record lacks is not compared", live: []checkpoint.TopicLayout{{Name: "new", ID: "x", Partitions: 9}}},
		{
			name: "partitions added",
			live: []checkpoint.TopicLayout{{Name: "in", ID: "id-in", Partitions: 8}},
			kind: checkpoint.ChangePartitions,
			want: []string{"the topics' layout differs from the checkpoint's (the job's layout record job/layout.json)", "topic in has 8 partitions, was 4 (partitions were added)"},
		},
		{
			name: "recreated",
			live: []checkpoint.TopicLayout{{Name: "in", ID: "id-new", Partitions: 4}},
			kind: checkpoint.ChangeRecreated,
			want: []string{"topic in was deleted and recreated: topic id id-new, was id-in"},
		},
		{
			name: "recreated with another count",
			live: []checkpoint.TopicLayout{{Name: "in", ID: "id-new", Partitions: 6}},
			kind: checkpoint.ChangeRecreated,
			want: []string{"topic id id-new, was id-in; 6 partitions, was 4"},
		},
		{
			name: "deleted",
			live: []checkpoint.TopicLayout{{Name: "in", ID: "id-in", Partitions: 4}, {Name: "job-by-word-repartition"}},
			kind: checkpoint.ChangeDeleted,
			want: []string{"topic job-by-word-repartition does not exist (it had 4 partitions, topic id id-rp)"},
		},
		{
			name: "several",
			live: []checkpoint.TopicLayout{{Name: "in", ID: "id-in", Partitions: 8}, {Name: "job-by-word-repartition", ID: "id-rp2", Partitions: 4}},
			kind: checkpoint.ChangePartitions,
			want: []string{"topic in has 8 partitions, was 4", "; topic job-by-word-repartition was deleted and recreated"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rec.Compare(tc.live)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want no change", err)
				}
				return
			}
			var le *checkpoint.LayoutError
			if !errors.As(err, &le) || !errors.Is(err, checkpoint.ErrLayoutChanged) {
				t.Fatalf("got %v, want a *LayoutError wrapping ErrLayoutChanged", err)
			}
			if le.Kind() != tc.kind {
				t.Errorf("kind %s, want %s", le.Kind(), tc.kind)
			}
			msg, at := err.Error(), 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error lacks %q (in order):\n%s", w, msg)
				}
				at += i + len(w)
			}
		})
	}
	le := &checkpoint.LayoutError{Changes: []checkpoint.LayoutChange{{Was: rec.Topics[0], Now: checkpoint.TopicLayout{Name: "in", ID: "id-in", Partitions: 8}}}, Advice: "start afresh"}
	if got, want := le.Error(), "the topics' layout differs from the checkpoint's: topic in has 8 partitions, was 4 (partitions were added). start afresh"; got != want {
		t.Errorf("with advice and no Against:\n got %s\nwant %s", got, want)
	}
}

// TestHasCheckpoints: only a completed checkpoint (a manifest) of the job
// counts; claims, unfinished checkpoints and other jobs' manifests do not.
func TestHasCheckpoints(t *testing.T) {
	ctx := t.Context()
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	has := func() bool {
		t.Helper()
		ok, err := checkpoint.HasCheckpoints(ctx, st, "job")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if has() {
		t.Fatal("empty storage has checkpoints")
	}
	put := func(name string) {
		t.Helper()
		if err := st.PutIfAbsent(ctx, name, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkpoint.Claim(ctx, st, "job", 3, 7); err != nil {
		t.Fatal(err)
	}
	put(checkpoint.OwnerDir("job", 3, 5, 7, "a") + "state")
	put(checkpoint.ManifestName("jobs", 1, 1))
	put(checkpoint.LayoutName("job"))
	if has() {
		t.Fatal("a claim, an unfinished checkpoint and another job's manifest count as checkpoints")
	}
	put(checkpoint.ManifestName("job", 3, 5))
	if !has() {
		t.Fatal("a manifest of task 3 does not count")
	}
}
