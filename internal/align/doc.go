// Package align decides, for an operator with several inputs, when a
// checkpoint barrier has been aligned: when the operator may take its
// snapshot for checkpoint n, which inputs it must stop reading meanwhile, and
// when an alignment has to be given up.
//
// It is the pure core of barrier alignment (DESIGN.md, "Checkpoints", step 4),
// in the style of etcd raft's RawNode: an [Aligner] is a plain struct that takes
// events (a barrier or the end of an input was read) and returns [Action]s. It
// starts no goroutines, reads no clock (time is an argument) and does no I/O, so
// every interleaving of inputs can be replayed deterministically in tests.
// An Aligner is not safe for concurrent use; it belongs to the one goroutine
// that drives its operator.
//
// # Modes
//
// In [ExactlyOnce] mode an input that delivered barrier n is blocked until
// barrier n has arrived on every input that has not ended. Then the operator
// snapshots and the blocked inputs are released. The snapshot therefore
// reflects exactly the records that precede barrier n on every input, and no
// record that follows it.
//
// In [AtLeastOnce] mode nothing is ever blocked: the operator keeps reading
// every input and snapshots when the last live input delivers barrier n. The
// snapshot reflects every record before barrier n on each input and possibly
// some records after it (those read from inputs whose barrier came early);
// after a restore those records are replayed, hence "at least once".
//
// # Rules
//
//   - Barrier n starts an alignment if none is in progress and n is newer than
//     every checkpoint started before. With a single live input it completes at
//     once: [Snapshot] with zero alignment time and no [Block].
//   - A barrier that is not newer than the newest checkpoint started so far,
//     and is not the missing barrier of the alignment in progress, is stale and
//     ignored: no action, and it never blocks. A repeated barrier n on an input
//     that already delivered n is ignored too.
//   - A barrier m newer than the alignment n in progress overtakes it: [Abort]
//     for n, [Unblock] for the inputs blocked by n, then alignment m starts (or
//     completes at once if every other live input has ended). Barriers n still
//     in flight on other inputs are stale from then on.
//   - An input that ended no longer counts: the end of an input can complete an
//     alignment in progress, and an ended input never holds the others back.
//     When every input has ended the aligner returns [EndOfInput], once. Ending
//     an input that already ended is ignored.
//   - [Snapshot.Alignment] is the time from the first barrier n to the event
//     that completed the alignment (the last barrier or an end of input), in
//     both modes; in at-least-once mode nothing was blocked during it, so it
//     measures barrier skew, not stall. It is zero when a single barrier
//     completes the alignment, and never negative.
//
// # Duties of the driver
//
// The driver is the goroutine of a multi-input operator (union, connect,
// co-process). It reads one bounded channel per input and must:
//
//  1. Never read input i while [Aligner.Blocked](i) is true. It selects over
//     the unblocked, not yet ended inputs only; a blocked input's records stay
//     in its channel, which fills and backpressures upstream. That is intended.
//  2. Process records and watermarks itself; the aligner never sees them.
//     Records read from input i before its barrier n belong to checkpoint n (they
//     are reflected in snapshot n). Watermarks are in band: a blocked input's
//     watermarks wait with its records.
//  3. Call [Aligner.Barrier] for every barrier it reads and [Aligner.End] when an
//     input ends (a bounded source finished or the upstream closed the channel),
//     passing the current time.
//  4. Carry out the returned actions in order, before reading anything else:
//     [Block]: stop reading that input (Blocked already says so; the action is
//     for logs and metrics). [Snapshot]: take the synchronous part of the
//     operator's snapshot, then forward exactly one barrier n downstream, both
//     before processing any further record. [Unblock]: resume reading those
//     inputs. [Abort]: forward nothing and decline checkpoint n to the
//     coordinator; records read afterwards belong to the next checkpoint.
//     [EndOfInput]: forward end of stream downstream; a Snapshot returned in
//     the same slice comes first and must be forwarded first.
//  5. Deliver barriers of one input in increasing order (the sources and the
//     coordinator guarantee this). An input may skip a checkpoint that was
//     declined upstream; the alignment waiting for it is aborted when that
//     input delivers a newer barrier, or completes when it ends.
//
// Misuse is a bug in the driver, not a runtime condition, and panics: an input
// index out of range, a barrier or end read from a blocked input, or a barrier
// read from an input that already ended.
package align
