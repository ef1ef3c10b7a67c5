package sink

import "sync/atomic"

// InFlightBudget bounds the records in flight (written, not yet
// acknowledged) of the exactly-once writers that share it, together:
// a worker's, all its tasks'. Each writer's gate keeps to an even share
// of it (budget / open writers, at least MinInFlightShare), besides its
// own bound by time (Config.FlushTarget) and its producer's buffer. A
// record in flight is a live object the collector marks at every cycle:
// at 64 tasks, each with its producer's 10,000 records in flight, the
// collector took a sixth of the worker's CPU, and 2,500 a task took 5
// to 11% off the worker's CPU a record. A share follows the writers
// open, so a worker with few tasks gives each the whole producer buffer.
type InFlightBudget struct {
	records int64
	writers atomic.Int64
}

// MinInFlightShare is the least share of a budget a writer keeps,
// however many share it: the budget is exceeded rather than a writer
// starved past this many writers.
const MinInFlightShare = 1000

// NewInFlightBudget returns a budget of records records in flight, at
// least MinInFlightShare.
func NewInFlightBudget(records int64) *InFlightBudget {
	return &InFlightBudget{records: max(records, MinInFlightShare)}
}

// join counts a writer in until the returned leave.
func (b *InFlightBudget) join() (leave func()) {
	b.writers.Add(1)
	var left atomic.Bool
	return func() {
		if left.CompareAndSwap(false, true) {
			b.writers.Add(-1)
		}
	}
}

// share is a writer's share now.
func (b *InFlightBudget) share() int64 {
	return max(b.records/max(b.writers.Load(), 1), MinInFlightShare)
}
