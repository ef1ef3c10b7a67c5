package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testManifest() Manifest {
	return Manifest{
		Version:    FormatVersion,
		Job:        "orders",
		Task:       3,
		Checkpoint: 17,
		Timestamp:  time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC),
		Epoch:      42,
		Operators: []Ack{
			{
				Operator: "count <&>",
				State: &StateHandle{Backend: "pebble", Size: 300, Incremental: 100, Files: []FileRef{
					{Name: "orders/shared/3/abc-000001.sst", Local: "000001.sst", Size: 200, SHA256: "00ff", Shared: true},
					{Name: "orders/tasks/3/chk-00000000000000000017/count/MANIFEST-000002", Local: "MANIFEST-000002", Size: 100, SHA256: "ff00"},
				}},
				Alignment: 3 * time.Millisecond,
			},
			{Operator: "sink", Committables: []Committable{{Operator: "sink", TransactionalID: "orders-3-1", ProducerID: 7, Epoch: 2, Data: json.RawMessage(`{"x":1}`)}}},
			{Operator: "source", Sources: []SourcePosition{{Source: "source", Topic: "in", Partition: 3, Offset: 1234}}},
		},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := testManifest()
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	// The checksum does not depend on layout: a re-indented file still reads.
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeManifest(compact.Bytes()); err != nil {
		t.Fatalf("compacted manifest: %v", err)
	}
}

func TestManifestRefused(t *testing.T) {
	good, err := EncodeManifest(testManifest())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		corrupt bool   // wraps ErrCorrupt
		want    string // substring of the error
	}{
		{name: "offset changed", data: bytes.Replace(good, []byte(`"offset": 1234`), []byte(`"offset": 1235`), 1), corrupt: true, want: "sha256"},
		{name: "checksum changed", data: bytes.Replace(good, []byte(`"sha256": "`), []byte(`"sha256": "0`), 1), corrupt: true, want: "sha256"},
		{name: "truncated", data: good[:len(good)/2], corrupt: true, want: "decode manifest"},
		{name: "empty", data: nil, corrupt: true, want: "decode manifest"},
		{name: "future version", data: bytes.Replace(good, []byte(`"version": 1`), []byte(`"version": 2`), 1), want: "unsupported format version 2 (this build reads version 1)"},
		{name: "no version", data: []byte(`{"manifest":{}}`), want: "unsupported format version 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if bytes.Equal(tc.data, good) {
				t.Fatal("test data not changed")
			}
			_, err := DecodeManifest(tc.data)
			if err == nil {
				t.Fatal("decoded")
			}
			if errors.Is(err, ErrCorrupt) != tc.corrupt || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want ErrCorrupt %v and %q in it", err, tc.corrupt, tc.want)
			}
		})
	}
	m := testManifest()
	m.Version = 2
	if _, err := EncodeManifest(m); err == nil {
		t.Fatal("encoded a manifest of version 2")
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ManifestName("orders", 3, 17), "orders/tasks/3/chk-00000000000000000017/manifest.json"},
		{CheckpointDir("orders", 3, 17), "orders/tasks/3/chk-00000000000000000017/"},
		{CheckpointDir("j", 0, 18446744073709551615), "j/tasks/0/chk-18446744073709551615/"},
		{SharedDir("orders", 3), "orders/shared/3/"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestListCheckpointsAndReadManifest(t *testing.T) {
	ctx := context.Background()
	st := NewMemory(MemoryOptions{})
	put := func(name string, data []byte) {
		t.Helper()
		if err := st.PutIfAbsent(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []ID{2, 10, 9} {
		m := testManifest()
		m.Checkpoint = id
		b, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		put(ManifestName("orders", 3, id), b)
	}
	put(CheckpointDir("orders", 3, 12)+"count/state", []byte("x"))    // incomplete, highest
	put(CheckpointDir("orders", 30, 99)+"manifest.json", []byte("x")) // another task
	put(CheckpointDir("other", 3, 50)+"manifest.json", []byte("x"))   // another job
	put(SharedDir("orders", 3)+"abc.sst", []byte("x"))
	put("orders/tasks/3/chk-junk/manifest.json", []byte("x"))
	put("orders/tasks/3/README", []byte("x"))

	completed, highest, err := ListCheckpoints(ctx, st, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(completed, []ID{2, 9, 10}) || highest != 12 {
		t.Fatalf("ListCheckpoints = %v, %d; want [2 9 10], 12", completed, highest)
	}
	completed, highest, err = ListCheckpoints(ctx, st, "nothing", 0)
	if err != nil || completed != nil || highest != 0 {
		t.Fatalf("empty ListCheckpoints = %v, %d, %v", completed, highest, err)
	}

	m, err := ReadManifest(ctx, st, "orders", 3, 9)
	if err != nil {
		t.Fatal(err)
	}
	if m.Checkpoint != 9 || m.Job != "orders" {
		t.Fatalf("ReadManifest(9) = %+v", m)
	}
	if _, err := ReadManifest(ctx, st, "orders", 3, 12); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadManifest of incomplete checkpoint: %v, want ErrNotFound", err)
	}
	// A manifest copied to another checkpoint's place is refused.
	b, _ := EncodeManifest(testManifest()) // checkpoint 17
	put(ManifestName("orders", 3, 18), b)
	if _, err := ReadManifest(ctx, st, "orders", 3, 18); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpoint 17") {
		t.Fatalf("misplaced manifest: %v", err)
	}
}
