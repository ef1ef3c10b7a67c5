package align

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// An Action is something the driver must do, in the order returned, before it
// reads any input again. It is one of [Block], [Unblock], [Snapshot], [Abort]
// and [EndOfInput].
type Action interface {
	isAction()
	fmt.Stringer
}

// Block says Input delivered the barrier being aligned and must not be read
// until an [Unblock] names it.
type Block struct{ Input int }

// Unblock says the driver may read Inputs again. Inputs are in increasing
// order and never empty.
type Unblock struct{ Inputs []int }

// Snapshot says checkpoint ID is aligned: take the operator's snapshot now,
// then forward one barrier ID downstream before processing any more records.
// Alignment is the time from the first barrier ID to the event that completed
// the alignment.
type Snapshot struct {
	ID        checkpoint.ID
	Alignment time.Duration
}

// Abort says the alignment of checkpoint ID was given up, because a newer
// barrier overtook it. Nothing is forwarded; the runtime declines checkpoint
// ID.
type Abort struct {
	ID     checkpoint.ID
	Reason string
}

// EndOfInput says every input has ended: forward end of stream downstream.
type EndOfInput struct{}

func (Block) isAction()      {}
func (Unblock) isAction()    {}
func (Snapshot) isAction()   {}
func (Abort) isAction()      {}
func (EndOfInput) isAction() {}

func (b Block) String() string    { return fmt.Sprintf("block input %d", b.Input) }
func (u Unblock) String() string  { return fmt.Sprintf("unblock inputs %v", u.Inputs) }
func (EndOfInput) String() string { return "end of input" }

func (s Snapshot) String() string {
	return fmt.Sprintf("snapshot %d (alignment %s)", s.ID, s.Alignment)
}

func (a Abort) String() string { return fmt.Sprintf("abort %d (%s)", a.ID, a.Reason) }
