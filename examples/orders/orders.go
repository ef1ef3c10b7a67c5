// Package orders is the example job of two inputs and two outputs: orders
// joined with their payments. An order that gets a payment of its amount is
// paid, once; every other payment (of another amount, or after the order
// was paid) is rejected, with its reason. Paid orders go to one topic and
// rejected payments to another, both in the one transaction of each task's
// checkpoint: a reader of both topics sees a payment either paid or
// rejected, never both, never twice.
//
// Both inputs are keyed by the order id (the record key), so the join needs
// no move: each order and its payments meet in the task of their partition,
// and the worker checks that of every record.
package orders

import (
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Order is a record of the orders topic, keyed by its ID.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// Payment is a record of the payments topic, keyed by its Order.
type Payment struct {
	ID     string `json:"id"`
	Order  string `json:"order"`
	Amount int64  `json:"amount"`
}

// Paid is an order paid in full, by Payment.
type Paid struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Payment  string `json:"payment"`
}

// Reject is a payment that pays nothing, and why.
type Reject struct {
	Payment string `json:"payment"`
	Order   string `json:"order"`
	Amount  int64  `json:"amount"`
	Reason  string `json:"reason"`
}

// Reasons of a Reject.
const (
	ReasonAmount      = "amount differs from the order's"
	ReasonAlreadyPaid = "order already paid"
)

// The topics the job reads and writes, by default: --topic NAME=TOPIC
// points each elsewhere.
const (
	OrdersTopic   = "orders"
	PaymentsTopic = "payments"
	PaidTopic     = "paid-orders"
	RejectsTopic  = "rejected-payments"
)

func init() { stream.Register("orders", Build) }

// Build is the orders job: OrdersTopic and PaymentsTopic -> Join ->
// PaidTopic and RejectsTopic.
func Build(job *stream.Job) {
	orders := stream.Read(job, "orders", OrdersTopic, DecodeOrder)
	payments := stream.Read(job, "payments", PaymentsTopic, DecodePayment)
	paid, rejects := Join(orders, payments)
	stream.Write(paid, "paid", PaidTopic, EncodePaid)
	stream.Write(rejects, "rejects", RejectsTopic, EncodeReject)
}

// The codecs of the topics: JSON values, keyed by the order id.
var (
	DecodeOrder   = decodeKeyed(func(o Order) string { return o.ID })
	DecodePayment = decodeKeyed(func(p Payment) string { return p.Order })
	EncodePaid    = encodeKeyed(func(p Paid) string { return p.Order })
	EncodeReject  = encodeKeyed(func(r Reject) string { return r.Order })
)

// Join matches each order with its payments, in the order they come: a
// payment that comes first waits for its order.
func Join(orders stream.Stream[Order], payments stream.Stream[Payment]) (stream.Stream[Paid], stream.Stream[Reject]) {
	byOrder := stream.KeyByPartitioned(orders, "orders-by-id", func(o Order) string { return o.ID }, state.String())
	paymentsByOrder := stream.KeyByPartitioned(payments, "payments-by-order", func(p Payment) string { return p.Order }, state.String())
	outcomes := stream.CoProcess(byOrder, paymentsByOrder, "match", newMatcher)
	// Split the outcomes: paid orders one way, rejected payments the other.
	paid := stream.FlatMap(outcomes, "paid-only", onlyPaid)
	rejects := stream.FlatMap(outcomes, "rejects-only", onlyRejects)
	return paid, rejects
}

func onlyPaid(o outcome, out *stream.Emitter[Paid]) error {
	if o.Paid == nil {
		return nil
	}
	return out.Emit(*o.Paid)
}

func onlyRejects(o outcome, out *stream.Emitter[Reject]) error {
	if o.Reject == nil {
		return nil
	}
	return out.Emit(*o.Reject)
}

// outcome is what a payment came to: one of the two.
type outcome struct {
	Paid   *Paid
	Reject *Reject
}

// newMatcher declares an order's state: the order, whether it is paid, and
// the payments that came before it.
func newMatcher(s *stream.Setup) (stream.CoProcessor[string, Order, Payment, outcome], error) {
	order, err := stream.ValueState(s, "order", state.JSON[Order]())
	if err != nil {
		return stream.CoProcessor[string, Order, Payment, outcome]{}, err
	}
	paid, err := stream.ValueState(s, "paid", state.String())
	if err != nil {
		return stream.CoProcessor[string, Order, Payment, outcome]{}, err
	}
	waiting, err := stream.ListState(s, "waiting", state.JSON[Payment]())
	if err != nil {
		return stream.CoProcessor[string, Order, Payment, outcome]{}, err
	}
	settle := func(ctx *stream.Context[string, outcome], o Order, p Payment) error {
		by, isPaid, err := paid.Get()
		switch {
		case err != nil:
			return err
		case isPaid:
			return ctx.Emit(outcome{Reject: &Reject{Payment: p.ID, Order: p.Order, Amount: p.Amount, Reason: ReasonAlreadyPaid + " by " + by}})
		case p.Amount != o.Amount:
			return ctx.Emit(outcome{Reject: &Reject{Payment: p.ID, Order: p.Order, Amount: p.Amount, Reason: fmt.Sprintf("%s (%d)", ReasonAmount, o.Amount)}})
		}
		if err := paid.Set(p.ID); err != nil {
			return err
		}
		return ctx.Emit(outcome{Paid: &Paid{Order: o.ID, Customer: o.Customer, Amount: o.Amount, Payment: p.ID}})
	}
	return stream.CoProcessor[string, Order, Payment, outcome]{
		Process1: func(ctx *stream.Context[string, outcome], o Order) error {
			if _, seen, err := order.Get(); err != nil || seen {
				return err // an order comes once; a second copy changes nothing
			}
			if err := order.Set(o); err != nil {
				return err
			}
			early, err := waiting.All()
			if err != nil {
				return err
			}
			for _, p := range early {
				if err := settle(ctx, o, p); err != nil {
					return err
				}
			}
			return waiting.Clear()
		},
		Process2: func(ctx *stream.Context[string, outcome], p Payment) error {
			o, ok, err := order.Get()
			if err != nil {
				return err
			}
			if !ok {
				return waiting.Add(p)
			}
			return settle(ctx, o, p)
		},
	}, nil
}

// decodeKeyed decodes a JSON value whose key must be the record's key: a
// record keyed otherwise is a bad record, never a join in the wrong task.
func decodeKeyed[T any](key func(T) string) stream.Decoder[T] {
	return func(r *kgo.Record) (T, error) {
		var v T
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return v, fmt.Errorf("orders: %w", err)
		}
		if k := key(v); k != string(r.Key) {
			return v, fmt.Errorf("orders: record key %q, want %q", r.Key, k)
		}
		return v, nil
	}
}

// encodeKeyed writes v as JSON, keyed by key.
func encodeKeyed[T any](key func(T) string) stream.Encoder[T] {
	return func(v T) (*kgo.Record, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return &kgo.Record{Key: []byte(key(v)), Value: b}, nil
	}
}
