package orders_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/orders"
	"github.com/weirstream/weir/stream"
)

// TestJoin runs the join over slices, payments before and after their
// orders: each order paid once by the first payment of its amount, every
// other payment rejected with its reason.
func TestJoin(t *testing.T) {
	var os []orders.Order
	var ps []orders.Payment
	for i := range 200 {
		id := fmt.Sprintf("o%d", i)
		os = append(os, orders.Order{ID: id, Customer: fmt.Sprintf("c%d", i%7), Amount: int64(100 + i)})
		amount := int64(100 + i)
		if i%10 == 0 {
			amount++ // rejected: another amount
		}
		ps = append(ps, orders.Payment{ID: "p" + id, Order: id, Amount: amount})
		if i%7 == 0 {
			ps = append(ps, orders.Payment{ID: "q" + id, Order: id, Amount: int64(100 + i)}) // a second payment
		}
	}
	// Half the payments come before all orders.
	early, late := ps[:len(ps)/2], ps[len(ps)/2:]
	job := stream.NewJob("orders-test")
	paid, rejects := stream.Collect[orders.Paid](), stream.Collect[orders.Reject]()
	ordersIn := stream.Source(job, "orders", stream.SliceSource([][]orders.Order{os}))
	paymentsIn := stream.Source(job, "payments", stream.SliceSource([][]orders.Payment{append(slices.Clone(early), late...)}))
	p, r := orders.Join(ordersIn, paymentsIn)
	stream.Sink(p, "paid", paid.Sink())
	stream.Sink(r, "rejects", rejects.Sink())
	if err := stream.RunLocal(t.Context(), job, stream.LocalOptions{Interval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	gotPaid := map[string]string{}
	for _, x := range paid.Records() {
		if _, twice := gotPaid[x.Order]; twice {
			t.Errorf("order %s paid twice", x.Order)
		}
		gotPaid[x.Order] = x.Payment
	}
	gotRejected := map[string]string{}
	for _, x := range rejects.Records() {
		if _, twice := gotRejected[x.Payment]; twice {
			t.Errorf("payment %s rejected twice", x.Payment)
		}
		gotRejected[x.Payment] = x.Reason
	}
	for i := range 200 {
		id := fmt.Sprintf("o%d", i)
		switch {
		case i%10 == 0 && i%7 == 0: // the second payment pays it
			if gotPaid[id] != "q"+id || !strings.HasPrefix(gotRejected["p"+id], orders.ReasonAmount) {
				t.Errorf("%s: paid by %q, p rejected %q", id, gotPaid[id], gotRejected["p"+id])
			}
		case i%10 == 0:
			if _, ok := gotPaid[id]; ok || !strings.HasPrefix(gotRejected["p"+id], orders.ReasonAmount) {
				t.Errorf("%s: paid %v, rejected %q", id, ok, gotRejected["p"+id])
			}
		case i%7 == 0:
			if gotPaid[id] != "p"+id || !strings.HasPrefix(gotRejected["q"+id], orders.ReasonAlreadyPaid) {
				t.Errorf("%s: paid by %q, q rejected %q", id, gotPaid[id], gotRejected["q"+id])
			}
		default:
			if gotPaid[id] != "p"+id {
				t.Errorf("%s: paid by %q", id, gotPaid[id])
			}
		}
	}
	wantRejects := 0
	for i := range 200 {
		if i%10 == 0 || i%7 == 0 {
			wantRejects++
		}
	}
	if len(gotRejected) != wantRejects {
		t.Errorf("%d rejects, want %d", len(gotRejected), wantRejects)
	}
}

// TestDecodeRefusesAnotherKey: a record keyed otherwise than its order is a
// bad record, never joined in a task that does not own the order.
func TestDecodeRefusesAnotherKey(t *testing.T) {
	r := &kgo.Record{Key: []byte("o2"), Value: []byte(`{"id":"o1","customer":"c","amount":5}`)}
	if _, err := orders.DecodeOrder(r); err == nil || !strings.Contains(err.Error(), `record key "o2", want "o1"`) {
		t.Errorf("DecodeOrder of a record keyed o2 for order o1: %v", err)
	}
	r.Key = []byte("o1")
	if o, err := orders.DecodeOrder(r); err != nil || o.Amount != 5 {
		t.Errorf("DecodeOrder: %+v %v", o, err)
	}
}
