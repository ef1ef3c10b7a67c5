package sink

import (
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// The decision table of Check, with the records a real Kafka 4.4 broker
// (transaction.version 2) and kfake showed for a transaction pre-committed
// at producer id 7, epoch 3.
func TestClassify(t *testing.T) {
	c := checkpoint.Committable{TransactionalID: "t", ProducerID: 7, Epoch: 3}
	const inconclusive = engine.CommitOutcome(-1)
	tests := []struct {
		name  string
		tv    int16
		state string
		pid   int64
		epoch int16
		want  engine.CommitOutcome
	}{
		{"open, as pre-committed", 2, "Ongoing", 7, 3, engine.CommitResumable},
		{"commit markers being written (broker, right after EndTxn)", 2, "PrepareCommit", 7, 4, engine.CommitDone},
		{"committed, tv2 bumps the epoch", 2, "CompleteCommit", 7, 4, engine.CommitDone},
		{"committed, tv1 keeps it", 1, "CompleteCommit", 7, 3, engine.CommitDone},
		{"aborted by transaction timeout (broker)", 2, "CompleteAbort", 7, 4, engine.CommitLost},
		{"abort in progress", 2, "PrepareAbort", 7, 4, engine.CommitLost},
		{"being fenced", 2, "PrepareEpochFence", 7, 4, engine.CommitLost},
		{"no record of the id (expired): committed or not, nothing tells", 2, stateNotFound, -1, -1, engine.CommitUnknown},
		{"another producer id (re-initialised after expiry)", 2, "Ongoing", 8, 0, engine.CommitUnknown},
		{"older epoch than saved", 2, "Ongoing", 7, 2, engine.CommitLost},
		{"fenced by InitProducerID, or committed then re-initialised (broker)", 2, "Empty", 7, 5, inconclusive},
		{"committed or aborted (kfake keeps no Complete states)", 2, "Empty", 7, 4, inconclusive},
		{"a later transaction is open", 2, "Ongoing", 7, 4, inconclusive},
		{"a later transaction committed", 2, "CompleteCommit", 7, 5, inconclusive},
		{"tv1: a commit at a later epoch", 1, "CompleteCommit", 7, 4, inconclusive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := classify(tt.tv, c, tt.state, tt.pid, tt.epoch)
			if !ok {
				got = inconclusive
			}
			if got != tt.want {
				t.Fatalf("classify(tv %d, %s at %d/%d) = %v (conclusive %v), want %v", tt.tv, tt.state, tt.pid, tt.epoch, got, ok, tt.want)
			}
		})
	}
}
