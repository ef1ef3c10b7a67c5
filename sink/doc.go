// Package sink writes a weir job's output to Kafka: it implements
// runtime.SinkFactory on franz-go, with three delivery guarantees.
//
// Exactly-once (the default) is a two-phase commit over Kafka transactions
// (DESIGN.md, "Exactly-once sink"). A task's sink owns a pool of K
// transactional ids "<prefix>-<task>-<slot>". The records between barriers
// n-1 and n go into one transaction on one slot; at barrier n the sink
// flushes it and reads its producer id and epoch: the committable that goes
// into checkpoint n's manifest (PreCommit). Once the manifest is durable the
// sink commits (Commit). A slot is reused only after a checkpoint later than
// every manifest naming its transaction is durable, so the newest manifest
// always names transactions nothing reused. A barrier interval without records
// begins no transaction and yields no committable.
//
// Recovery, when a task restores a manifest: the factory first commits the
// manifest's committables by resuming their transactions (EndTxn with the
// saved producer id and epoch, decided by the transaction coordinator's own
// record, see Check), then initialises every other slot afresh, which fences
// a zombie owner and aborts what it left open. The slots of the restored
// transactions are initialised at the first checkpoint that completes after
// the restore: until then the coordinator's record ("CompleteCommit") is the
// only evidence that they committed, and a restore of the same manifest after
// another failure needs it (once a slot is initialised again, a real broker
// shows the same record, Empty at a later epoch, for a committed transaction
// as for a fenced one). A committable that can no longer commit makes the
// factory fail with a *LostError: the checkpoint is invalid and the caller
// must restore an earlier one, or fail loudly.
//
// At-least-once writes with an idempotent producer and flushes at each
// barrier; none writes fire-and-forget and never flushes.
//
// Duties of the caller (the worker):
//   - Refuse to start when CheckTimeout or CheckPoolSize refuse the sink's
//     settings against the checkpoint configuration: a transaction timeout
//     shorter than a pre-committed transaction may have to wait loses
//     checkpoints; a pool that can run out fails the task (ErrNoFreeSlot),
//     since the sink cannot wait for a commit that is delivered on its own
//     goroutine.
//   - Before restoring a manifest, ask Validate (or a Validator) whether its
//     committables can still commit; walk back past a manifest that yields a
//     *LostError, and fail the task naming what was lost if none is valid.
//   - Give every job and every sink of a job its own transactional id prefix
//     (the default, "<job>-<operator>", does): sinks sharing ids fence each
//     other.
//   - Read the output read_committed.
//   - Create the output topic beforehand unless the broker auto-creates it.
package sink
