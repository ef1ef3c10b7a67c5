package balance_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		before int64
		tr     balance.Transfer
		want   balance.Balance
	}{
		{0, balance.Transfer{ID: "t-1", Account: "acc-1", Amount: 100}, balance.Balance{Account: "acc-1", Balance: 100, TransferID: "t-1"}},
		{100, balance.Transfer{ID: "t-2", Account: "acc-1", Amount: -120}, balance.Balance{Account: "acc-1", Balance: -20, TransferID: "t-2"}},
		{-20, balance.Transfer{ID: "t-3", Account: "acc-1", Amount: 0}, balance.Balance{Account: "acc-1", Balance: -20, TransferID: "t-3"}},
	} {
		if got := balance.Apply(tc.before, tc.tr); got != tc.want {
			t.Errorf("Apply(%d, %+v) = %+v, want %+v", tc.before, tc.tr, got, tc.want)
		}
	}
}

func TestDecodeAndEncode(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  balance.Transfer
		err   bool
	}{
		{`{"id":"t-1","account":"acc-7","amount":-120}`, balance.Transfer{ID: "t-1", Account: "acc-7", Amount: -120}, false},
		{`{"id":"t-1","amount":5}`, balance.Transfer{}, true},
		{`{"account":"acc-7","amount":5}`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7","amount":"lots"}`, balance.Transfer{}, true},
		{`not json`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7"}`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7","amout":5}`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7","amount":5} {"id":"t-2"}`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7","amount":5}}`, balance.Transfer{}, true},
		{`{"id":"t-1","account":"acc-7","amount":5}]`, balance.Transfer{}, true},
		{"{\"id\":\"t-1\",\"account\":\"acc-7\",\"amount\":5}\n", balance.Transfer{ID: "t-1", Account: "acc-7", Amount: 5}, false},
		{`{"id":"t-1","account":"acc-7","amount":0}`, balance.Transfer{ID: "t-1", Account: "acc-7"}, false},
	} {
		got, err := balance.Decode(&kgo.Record{Value: []byte(tc.value)})
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Decode(%s) = %+v, %v; want %+v, error %v", tc.value, got, err, tc.want, tc.err)
		}
	}
	r, err := balance.Encode(balance.Balance{Account: "acc-7", Balance: 880, TransferID: "t-17"})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Key) != "acc-7" || string(r.Value) != `{"account":"acc-7","balance":880,"transfer_id":"t-17"}` {
		t.Errorf("Encode: key %q value %s", r.Key, r.Value)
	}
}

// collect is a sink that keeps what each checkpoint committed.
type collect struct {
	mu  sync.Mutex
	out []balance.Balance
}

type collectWriter struct {
	c       *collect
	pending []balance.Balance
}

func (c *collect) factory() engine.SinkFactory[balance.Balance] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[balance.Balance], error) {
		return &collectWriter{c: c}, nil
	}
}

func (w *collectWriter) Write(_ context.Context, b balance.Balance) error {
	w.pending = append(w.pending, b)
	return nil
}

func (w *collectWriter) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}

func (w *collectWriter) Commit(context.Context, checkpoint.ID) error {
	w.c.mu.Lock()
	w.c.out = append(w.c.out, w.pending...)
	w.c.mu.Unlock()
	w.pending = nil
	return nil
}

func (w *collectWriter) Close() error { return nil }

// TestJob runs the job on two partitions of transfers, each account in one
// partition as Kafka's partitioner would place it.
func TestJob(t *testing.T) {
	const perPart, accounts = 3000, 10
	parts := make([][]balance.Transfer, 2)
	want := map[string]int64{}
	for p := range parts {
		for i := range perPart {
			acc := fmt.Sprintf("acc-%d", p+2*(i%accounts))
			tr := balance.Transfer{ID: fmt.Sprintf("t-%d-%d", p, i), Account: acc, Amount: int64(i%201 - 100)}
			parts[p] = append(parts[p], tr)
			want[acc] += tr.Amount
		}
	}
	out := &collect{}
	job := stream.NewJob("balance-test")
	stream.Sink(balance.Balances(stream.Source(job, balance.SourceName, stream.SliceSource(parts))), balance.SinkName, out.factory())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{
		Tasks:      []int{0, 1},
		Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		StateDir:   t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, b := range out.out {
		if seen[b.TransferID] {
			t.Errorf("transfer %s applied twice", b.TransferID)
		}
		seen[b.TransferID] = true
		last[b.Account] = b.Balance // a task emits an account's balances in order
	}
	if len(seen) != 2*perPart {
		t.Errorf("%d transfers applied, want %d", len(seen), 2*perPart)
	}
	for acc, w := range want {
		if last[acc] != w {
			t.Errorf("%s: final balance %d, want %d", acc, last[acc], w)
		}
	}
}
