package main

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/examples/count"
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

func TestCheckBalance(t *testing.T) {
	var in, good []*kgo.Record
	bal := map[string]int64{}
	for i := range int64(60) {
		r, _ := generatedRecord("balance", i, 4)
		in = append(in, r)
		tr, err := balance.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		b := balance.Apply(bal[tr.Account], tr)
		bal[tr.Account] = b.Balance
		o, _ := balance.Encode(b)
		good = append(good, o)
	}
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
