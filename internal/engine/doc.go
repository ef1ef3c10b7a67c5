// Package engine runs a job's dataflow graph as tasks:
// it builds each task's operator chains from a [Plan], restores the task
// from its latest valid checkpoint, drives its checkpoints (barriers,
// alignment, snapshots, the two-phase commit of its sinks) and supervises
// it, restarting it after a failure. Package stream is the typed builder
// over it; package worker runs it in a worker process.
//
// A [Graph] records the nodes its constructors add ([Source], [Sink] and
// the operators between); [Graph.Plan] returns every error found while
// building, joined, and only a Plan runs. [Run] runs the tasks of
// Config.Tasks with one fencing epoch until they end, drain, ctx ends or
// one fails for good; a [Runner] runs tasks that come and go (a worker's
// group assignment) with [Runner.Start], [Runner.Stop] and [Runner.Abort].
// Both own every goroutine they start: Run returns, and a Runner's Stop,
// Abort and Wait return, only once the tasks concerned have ended and
// closed their state stores.
//
// # Duties of the caller
//
// Run a task in one place at a time, and give each owner of a task a
// fencing epoch larger than every earlier owner's (checkpoint.NextEpoch),
// as Config.Epoch or to Runner.Start. The engine keeps owners that overlap
// anyway (a worker paused past its session, a task handed over while its
// old owner still runs) from corrupting output with checkpoint claims:
// each attempt claims the task with its epoch before it restores
// (checkpoint.Claim), and looks at the claims again before its sinks open
// and before each commit. An owner that finds a newer claim stops with
// [ErrSuperseded], and a Runner does not restart it: the caller must not
// start it again with the same epoch, but give the task back. Claims
// only work on a storage whose listings show what was written before
// (docs/ownership.md). Config.StateDir is not shared with another process
// of the job (a worker locks its own).
//
// Give Config.Partitions the partition count of the job's input topics as
// its checkpoints record it, and Config.Partitioner the input producers'
// partitioner: with them every keyed operator checks that each record's
// key belongs to its task ([ErrMisKeyed]). The [Observer] is called from
// the tasks' goroutines, concurrently, on their path: it must be safe for
// concurrent use and quick.
//
// # Sources
//
// A [SourceFactory] opens one [SourceReader] per task and source operator,
// given the positions of the checkpoint the task restores (nil on a fresh
// start). The reader resumes exactly there, and reading again from the same
// positions yields the same records, as a Kafka partition does: that is
// what makes replay after a restore exactly once. Positions returns, per
// split, the offset of the next record Poll would return, so it must agree
// with what Poll appended. Poll returns within tens of milliseconds when no
// record is ready (barriers and timers wait for it) and ErrEndOfInput once
// a bounded source is exhausted. A reader is used from one goroutine.
//
// # Sinks
//
// A [SinkOpener] opens one [SinkWriter] per task and sink operator, given
// the committables of the restored checkpoint that storage does not know
// committed: Open commits them before it returns (some may be committed
// already: committing is idempotent) and fences every earlier writer of the
// task. At each barrier PreCommit flushes and pre-commits what was written
// since the previous one and returns every pre-commit not yet committed;
// an error fails the task, which writes the records again after its
// restore. Once a checkpoint's manifest is durable, Commit(id) commits
// every pre-commit up to id; once it returns they are committed. A sink
// whose writers pre-commit also implements [Committer], which restore asks
// what became of the committables that storage has no record of:
// CheckCommittables changes nothing, AbortCommittables makes the open ones
// uncommittable by any writer. Without a Committer every committable is
// taken as resumable.
//
// # Stopping
//
// Draining (closing Config.Drain, or Runner.Stop) makes every source of a
// task stop reading as if its input had ended: the task takes a final
// checkpoint, its sinks commit it, and the task ends with nil; its next
// owner resumes exactly there. A Stop whose final checkpoint does not
// complete within its bound cancels the task where it is. A task asked to
// drain while it is down after a failure has no final checkpoint to take:
// its end says so ([DownWhenStopped]) and must not pass for a clean stop.
// Cancelling the context, or Runner.Abort, stops at once without a
// checkpoint; either way the next owner restores the task's last completed
// checkpoint.
//
// A failed task restarts from its latest checkpoint after a backoff that
// doubles from Config.RestartBackoff to Config.MaxRestartBackoff, at most
// Config.MaxRestarts times in a row. With Config.Reachable the wait ends
// early when the fault ends: a probe failed during it, or an earlier one
// since the task's last completed checkpoint, and one answers now; the
// backoff then starts over, and the count too for the first
// Config.MaxRestarts such all-clears without a completed checkpoint (a task
// failing for a cause of its own under a flapping probe still gives up).
// What a restart cannot mend ends it at
// once: [ErrSuperseded], [ErrIncompatibleCheckpoint], [ErrNoValidCheckpoint],
// [ErrMisKeyed] and checkpoint.ErrLayoutChanged. A failure that is
// [Holding] (a sink's, whose evidence may not outlast it) writes a hold into
// checkpoint storage, and every start of the task, on any worker, then
// fails with a [HeldError] until an operator releases the hold.
package engine
