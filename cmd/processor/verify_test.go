package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/testcluster"
)

func countRecords(n int64, keys int) []*kgo.Record {
	var rs []*kgo.Record
	for i := range n {
		r, _ := generatedRecord("count", i, keys)
		rs = append(rs, r)
	}
	return rs
}

// countOutput is what a correct count job emits for in.
func countOutput(t *testing.T, in []*kgo.Record) []*kgo.Record {
	n, sum := map[string]int64{}, map[string]int64{}
	var out []*kgo.Record
	for _, r := range in {
		x, err := count.Decode(r)
		if err != nil {
			continue
		}
		n[x.Key]++
		sum[x.Key] += x.N
		o, err := count.Encode(count.Out{Key: x.Key, Count: n[x.Key], Sum: sum[x.Key]})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func TestCheckCount(t *testing.T) {
	in := countRecords(100, 7)
	in = append(in, &kgo.Record{Key: []byte("k1"), Value: []byte("x")})
	good := countOutput(t, in)
	for _, tc := range []struct {
		name                       string
		out                        []*kgo.Record
		dups, missing, wrong, junk int64
	}{
		{"exactly once", good, 0, 0, 0, 0},
		{"one duplicated", append(append([]*kgo.Record{}, good...), good[5]), 1, 0, 0, 0},
		{"one missing", append(append([]*kgo.Record{}, good[:50]...), good[51:]...), 0, 1, 0, 0},
		// The last update of a key lost: its count and sum are short.
		{"last missing", good[:99], 0, 1, 1, 0},
		// A record applied twice in state: counts run past the input.
		{"applied twice", countOutput(t, append(append([]*kgo.Record{}, in...), in[3])), 1, 0, 1, 0},
		{"malformed", append(append([]*kgo.Record{}, good...), &kgo.Record{Value: []byte("{")}), 0, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := checkCount(in, tc.out)
			if v.Duplicates != tc.dups || v.Missing != tc.missing || v.WrongTotals != tc.wrong || v.Malformed != tc.junk || v.BadInput != 1 {
				t.Fatalf("got %v (bad input %d); want duplicates %d, missing %d, wrong sums %d, malformed %d",
					v, v.BadInput, tc.dups, tc.missing, tc.wrong, tc.junk)
			}
			if v.Clean() != (tc.dups+tc.missing+tc.wrong+tc.junk == 0) {
				t.Fatalf("Clean() = %v for %v", v.Clean(), v)
			}
		})
	}
}

// balanceOutput is what a balance job emits applying in's transfers in
// order (indexes into in), all of them if order is nil.
func balanceOutput(t *testing.T, in []*kgo.Record, order []int) []*kgo.Record {
	t.Helper()
	if order == nil {
		for i := range in {
			order = append(order, i)
		}
	}
	bal := map[string]int64{}
	var out []*kgo.Record
	for _, i := range order {
		tr, err := balance.Decode(in[i])
		if err != nil {
			t.Fatal(err)
		}
		b := balance.Apply(bal[tr.Account], tr)
		bal[tr.Account] = b.Balance
		o, _ := balance.Encode(b)
		out = append(out, o)
	}
	return out
}

func TestCheckBalance(t *testing.T) {
	var in []*kgo.Record
	for i := range int64(60) {
		r, _ := generatedRecord("balance", i, 4)
		in = append(in, r)
	}
	good := balanceOutput(t, in, nil)
	stray, _ := balance.Encode(balance.Balance{Account: "acc-1", Balance: 1, TransferID: "t-999"})
	for _, tc := range []struct {
		name                 string
		out                  []*kgo.Record
		dups, missing, wrong int64
	}{
		{"exactly once", good, 0, 0, 0},
		{"duplicate in the middle", append(append(append([]*kgo.Record{}, good[:10]...), good[9]), good[10:]...), 1, 0, 0},
		{"missing last", good[:59], 0, 1, 1},
		// The stray record is acc-1's last: its balance is wrong too.
		{"unknown transfer", append(append([]*kgo.Record{}, good[:59]...), stray, good[59]), 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := checkBalance(in, tc.out)
			if v.Duplicates != tc.dups || v.Missing != tc.missing || v.WrongTotals != tc.wrong {
				t.Fatalf("got %v; want duplicates %d, missing %d, wrong balances %d", v, tc.dups, tc.missing, tc.wrong)
			}
		})
	}
	if got := fmt.Sprint(checkBalance(in, good)); got != "records in 60, records out 60, duplicates 0, missing 0, wrong balances 0" {
		t.Errorf("String: %s", got)
	}
}

// Output that has every count once and the right final sums can still be
// wrong: a key's inputs applied out of order, its updates written out of
// order, a running sum wrong on the way, a record under another key. The
// verifier calls none of them clean.
func TestCheckCountOrder(t *testing.T) {
	in := countRecords(30, 3) // k0 has 0, 3, 6, ...
	good := countOutput(t, in)
	swapped := append([]*kgo.Record{}, in...)
	swapped[0], swapped[3] = swapped[3], swapped[0]
	reordered := append([]*kgo.Record{}, good...)
	reordered[0], reordered[3] = reordered[3], reordered[0]
	wrongSum := append([]*kgo.Record{}, good...)
	wrongSum[3], _ = count.Encode(count.Out{Key: "k0", Count: 2, Sum: 999})
	wrongKey := append([]*kgo.Record{}, good...)
	wrongKey[0] = &kgo.Record{Key: []byte("k1"), Value: good[0].Value}
	for name, out := range map[string][]*kgo.Record{
		"inputs applied out of order": countOutput(t, swapped),
		"updates out of order":        reordered,
		"a running sum wrong":         wrongSum,
		"under another key":           wrongKey,
	} {
		if v := checkCount(in, out); v.Clean() {
			t.Errorf("%s: %v, clean", name, v)
		}
	}
	if v := checkCount(in, good); !v.Clean() || v.OutOfOrder != 0 {
		t.Errorf("exactly once: %v", v)
	}
}

func TestCheckWordcountOrder(t *testing.T) {
	in := []*kgo.Record{{Value: []byte("a b a")}}
	out := func(word string, n int64) *kgo.Record {
		r, err := wordcount.Encode(wordcount.Out{Word: word, Count: n})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if v := checkWordcount(in, []*kgo.Record{out("a", 1), out("b", 1), out("a", 2)}); !v.Clean() {
		t.Errorf("exactly once: %v", v)
	}
	if v := checkWordcount(in, []*kgo.Record{out("a", 2), out("b", 1), out("a", 1)}); v.Clean() {
		t.Errorf("a's counts 2 then 1: %v, clean", v)
	}
}

func TestCheckBalanceSteps(t *testing.T) {
	var in []*kgo.Record
	for i := range int64(12) {
		r, _ := generatedRecord("balance", i, 2)
		in = append(in, r)
	}
	if v := checkBalance(in, balanceOutput(t, in, nil)); !v.Clean() {
		t.Errorf("exactly once: %v", v)
	}
	// Two transfers of one account applied in the other order: the last
	// balance is right, the one between is not.
	if v := checkBalance(in, balanceOutput(t, in, []int{2, 1, 0, 3, 4, 5, 6, 7, 8, 9, 10, 11})); v.Clean() {
		t.Errorf("transfers applied out of order: %v, clean", v)
	}
}

// processor verify does not pass output while a transaction still holds
// records back: they may be duplicates (here a copy of the last record).
func TestVerifyWaitsForOpenTransactions(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 1, in, out)
	inputs := countRecords(10, 2)
	for _, r := range inputs {
		r.Topic = in
	}
	plain := c.Client(t)
	if err := plain.ProduceSync(ctx, inputs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	outs := countOutput(t, inputs)
	for _, r := range outs {
		r.Topic = out
	}
	if err := plain.ProduceSync(ctx, outs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn := c.Client(t, kgo.TransactionalID(testcluster.UniqueName(t, "txn")))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	dup := *outs[len(outs)-1]
	if err := txn.ProduceSync(ctx, &dup).FirstErr(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, env(), "verify", "--brokers", strings.Join(c.Brokers, ","), "--input", in, "--output", out, "--wait", "2s")
	if code == 0 || !strings.Contains(stdout, "note:") {
		t.Fatalf("exit %d with a transaction open:\n%s%s", code, stdout, stderr)
	}
}
