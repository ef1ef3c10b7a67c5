// Package balance is an example weir job: the running balance of every
// account, from a topic of transfers keyed by account.
//
// Input records carry a JSON transfer, {"id":"t-17","account":"acc-7","amount":-120},
// with the account as the Kafka record key (so that each account's transfers
// are in one partition, in order). For every transfer the job emits the
// account's balance after it, {"account":"acc-7","balance":880,"transfer_id":"t-17"},
// keyed by account. The balance lives in keyed state, so after a crash and a
// restore from a checkpoint every transfer still counts exactly once.
//
// Build wires the graph from any source and sink, so that the same job runs
// on Kafka (see cmd/balance and cmd/processor) and in tests on slices.
package balance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Transfer moves Amount (in cents; negative for a debit) on Account.
type Transfer struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Balance is an account's balance right after the transfer TransferID.
type Balance struct {
	Account    string `json:"account"`
	Balance    int64  `json:"balance"`
	TransferID string `json:"transfer_id"`
}

// Operator names. They key the state and source positions in checkpoints:
// a worker refuses to restore a checkpoint that has a source or a stateful
// operator under a name the job no longer has.
const (
	SourceName  = "transfers"
	KeyByName   = "by-account"
	ProcessName = "balance"
	SinkName    = "balances"
)

// Topics the job reads and writes, by default (--input and --output point
// them elsewhere).
const (
	InputTopic  = "transfers"
	OutputTopic = "balances"
)

func init() { stream.Register("balance", Build) }

// Build is the balance job: InputTopic -> Balances -> OutputTopic.
func Build(job *stream.Job) {
	stream.Write(Balances(stream.Read(job, SourceName, InputTopic, Decode)), SinkName, OutputTopic, Encode)
}

// Balances is the balance graph: transfers keyed by account (the record
// key: no move) -> balance.
func Balances(transfers stream.Stream[Transfer]) stream.Stream[Balance] {
	byAccount := stream.KeyByPartitioned(transfers, KeyByName, func(t Transfer) string { return t.Account }, state.String())
	return stream.Process(byAccount, ProcessName, newProcessor)
}

// newProcessor declares the keyed state (one int64 per account) once per
// task; Process then runs with the state scoped to the transfer's account.
func newProcessor(s *stream.Setup) (stream.Processor[string, Transfer, Balance], error) {
	balance, err := stream.ValueState(s, "balance", state.Int64())
	if err != nil {
		return stream.Processor[string, Transfer, Balance]{}, err
	}
	return stream.Processor[string, Transfer, Balance]{
		Process: func(ctx *stream.Context[string, Balance], t Transfer) error {
			b, _, err := balance.Get() // 0 for an account not seen yet
			if err != nil {
				return err
			}
			next := Apply(b, t)
			if err := balance.Set(next.Balance); err != nil {
				return err
			}
			return ctx.Emit(next)
		},
	}, nil
}

// Apply is the business logic: the balance after t, given the balance
// before it.
func Apply(before int64, t Transfer) Balance {
	return Balance{Account: t.Account, Balance: before + t.Amount, TransferID: t.ID}
}

// Decode reads a transfer from a Kafka record's JSON value. A transfer
// without an id, an account or an amount, or with a field it does not know
// (a misspelled "amout"), is an error: the source dead-letters the record
// or fails the task, as configured, instead of crediting nobody or
// crediting 0.
func Decode(r *kgo.Record) (Transfer, error) {
	var t struct {
		Transfer
		Amount *int64 `json:"amount"`
	}
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.DisallowUnknownFields()
	if err := d.Decode(&t); err != nil {
		return Transfer{}, fmt.Errorf("transfer: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return Transfer{}, errors.New("transfer: more after the JSON object")
	}
	switch {
	case t.ID == "":
		return Transfer{}, errors.New("transfer: no id")
	case t.Account == "":
		return Transfer{}, fmt.Errorf("transfer %s: no account", t.ID)
	case t.Amount == nil:
		return Transfer{}, fmt.Errorf("transfer %s: no amount", t.ID)
	}
	t.Transfer.Amount = *t.Amount
	return t.Transfer, nil
}

// Encode writes a balance as JSON, keyed by account: an account's balances
// stay in one output partition, in order, so the last one read is the
// current balance.
func Encode(b Balance) (*kgo.Record, error) {
	v, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(b.Account), Value: v}, nil
}

// EncodeTransfer is the record a producer of transfers writes: the JSON
// transfer, keyed by account.
func EncodeTransfer(t Transfer) (*kgo.Record, error) {
	v, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(t.Account), Value: v}, nil
}
