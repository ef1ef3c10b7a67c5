package source_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// TestSharedConsumer runs the reader's tests again with the readers of
// each test sharing one Consumers, as a worker's tasks do.
func TestSharedConsumer(t *testing.T) {
	tests := map[string]func(*testing.T){
		"ReadsOnlyItsPartition":       TestReadsOnlyItsPartition,
		"PositionsFollowPoll":         TestPositionsFollowPoll,
		"RestoreResumesExactly":       TestRestoreResumesExactly,
		"Start":                       TestStart,
		"RestoredPositionsChecked":    TestRestoredPositionsChecked,
		"RestoredOffsetOutOfRange":    TestRestoredOffsetOutOfRange,
		"DecodeFailure":               TestDecodeFailure,
		"IdlePollReturnsPromptly":     TestIdlePollReturnsPromptly,
		"WakeEndsAPoll":               TestWakeEndsAPoll,
		"RestoreRefusesChangedLayout": TestRestoreRefusesChangedLayout,
		"LogLost":                     TestLogLost,
		"WatermarkMarkers":            TestWatermarkMarkers,
		"TransactionsResumeExactly":   TestTransactionsResumeExactly,
		"RunsInJob":                   TestRunsInJob,
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range tests {
			if !yield(n) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			shared = source.NewConsumers(0, 1, nil)
			t.Cleanup(func() {
				if n := shared.Clients(); len(n) != 0 {
					t.Errorf("clients left open after the readers closed: readers %v", n)
				}
				shared = nil
			})
			tests[name](t)
		})
	}
}

// TestSharedReadersStayApart: readers of one Consumers share one client;
// a reader that does not poll holds back none of the others (its
// partitions pause when its queue is full) and loses nothing; a reader
// closed mid-stream and reopened from its positions while the client
// lives on gets its records again from there, none of what the client
// fetched for its previous run; and a reader opened for a partition that
// another reader still reads gets a client of its own and every record.
func TestSharedReadersStayApart(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	const parts, n = 4, 1000
	createTopics(t, c, parts, topic)
	pr := producer(t, c)
	for p := range int32(parts) {
		vals := values(fmt.Sprintf("p%d-", p), 0, n)
		for i := 0; i < n; i += 100 {
			produce(t, pr, topic, p, vals[i:i+100]...)
		}
	}
	// A queue of 8 KiB holds about 50 records: a reader not polled pauses
	// its partition after a fetch or two.
	var opened []string // the clients opened with the Consumers' options
	cs := source.NewConsumers(8<<10, 1, func(name string, _ int) []kgo.Opt {
		opened = append(opened, name)
		return []kgo.Opt{kgo.ClientID("weir-test-" + name)}
	})
	cfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, MaxPollRecords: 64, Consumers: cs}
	readers := make([]engine.SourceReader[string], parts)
	for p := range parts {
		readers[p] = openReader(t, cfg, p, nil)
	}
	if got := cs.Clients(); !slices.Equal(got, []int{parts}) {
		t.Fatalf("clients and their readers: %v, want one client of %d readers", got, parts)
	}
	inOrder := func(p int, got []string, from, to int) {
		t.Helper()
		if want := values(fmt.Sprintf("p%d-", p), from, to); !slices.Equal(got, want) {
			t.Fatalf("partition %d: got %d records %v..., want %d from %d in order", p, len(got), got[:min(5, len(got))], to-from, from)
		}
	}
	// Reader 0 is not polled while the others read everything.
	for p := 1; p < parts; p++ {
		inOrder(p, drain(t, readers[p], n).Values, 0, n)
		assertQuiet(t, readers[p])
	}

	first := drain(t, readers[0], 320).Values // five polls of 64
	inOrder(0, first, 0, 320)
	saved := readers[0].Positions()
	readers[0].Close()
	produce(t, pr, topic, 0, values("p0-", n, n+200)...)
	r0 := openReader(t, cfg, 0, saved)
	inOrder(0, drain(t, r0, n+200-320).Values, 320, n+200)
	assertQuiet(t, r0)
	if got := cs.Clients(); !slices.Equal(got, []int{parts}) {
		t.Fatalf("clients and their readers after the reopen: %v, want one client of %d readers", got, parts)
	}

	// Partition 2 is still readers[2]'s: another reader of it reads with a
	// client of its own, from where it is told.
	again := openReader(t, cfg, 2, []checkpoint.SourcePosition{{Source: "src", Topic: topic, Partition: 2, Offset: 990}})
	inOrder(2, drain(t, again, 10).Values, 990, n)
	// Its client has the options of the shared one (TLS, SASL, ... in a
	// worker), as the shared one has.
	if want := []string{"src", "src"}; !slices.Equal(opened, want) {
		t.Fatalf("clients opened with the Consumers' options: %q, want %q", opened, want)
	}
	if got := cs.Clients(); !slices.Equal(got, []int{parts}) {
		t.Fatalf("clients and their readers with a reader of its own: %v, want one client of %d readers", got, parts)
	}
	produce(t, pr, topic, 2, "p2-1000")
	inOrder(2, drain(t, readers[2], 1).Values, n, n+1)
	inOrder(2, drain(t, again, 1).Values, n, n+1)

	for _, r := range []engine.SourceReader[string]{r0, readers[1], readers[2], readers[3], again} {
		r.Close()
	}
	if got := cs.Clients(); len(got) != 0 {
		t.Fatalf("clients left open after every reader closed: readers %v", got)
	}
}

// TestConsumersShareFromTheNthReader: the first readers of a source have
// clients of their own; from the shareFrom-th open at once, they share one.
func TestConsumersShareFromTheNthReader(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 4, topic)
	cs := source.NewConsumers(0, 3, nil)
	cfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, Consumers: cs}
	var readers []engine.SourceReader[string]
	for p := range 4 {
		readers = append(readers, openReader(t, cfg, p, nil))
	}
	if got := cs.Clients(); !slices.Equal(got, []int{2}) {
		t.Fatalf("4 readers, sharing from the 3rd: shared clients and their readers %v, want one of 2", got)
	}
	readers[0].Close()
	readers[0] = openReader(t, cfg, 0, nil)
	if got := cs.Clients(); !slices.Equal(got, []int{3}) {
		t.Fatalf("a reader reopened while 3 are open: shared clients and their readers %v, want one of 3", got)
	}
	pr := producer(t, c)
	for p := range int32(4) {
		produce(t, pr, topic, p, values(fmt.Sprintf("p%d-", p), 0, 3)...)
	}
	for p, r := range readers {
		if got, want := drain(t, r, 3).Values, values(fmt.Sprintf("p%d-", p), 0, 3); !slices.Equal(got, want) {
			t.Fatalf("reader %d: %v, want %v", p, got, want)
		}
	}
	for _, r := range readers {
		r.Close()
	}
	if got := cs.Clients(); len(got) != 0 {
		t.Fatalf("clients left open after every reader closed: %v", got)
	}
}
