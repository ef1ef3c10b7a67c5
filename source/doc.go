// Package source reads Kafka topics into a weir job: it implements
// runtime.SourceFactory on franz-go.
//
// A job's task p reads partition p of every input topic, by direct partition
// assignment (no consumer group rebalancing inside the source: the worker's
// group balancer moves whole tasks). Every input topic must therefore have the
// same partition count; [PartitionCount] tells the worker how many tasks a job
// has and refuses topics whose counts differ, and a reader refuses to open for
// a task that has no partition.
//
// Records are read read_committed: records of aborted transactions are never
// returned, and a record becomes visible only once its transaction committed.
// The offset a reader reports for a checkpoint ([runtime.SourceReader]
// Positions) is the offset after the last record Poll returned, per
// partition, not franz-go's fetch position (which may be ahead: fetched but
// not yet returned records stay buffered and come with the next Poll).
// Offsets of returned records are not contiguous across transaction markers
// and aborted batches; "last returned + 1" still resumes exactly, since the
// skipped offsets hold nothing a read_committed reader would return.
//
// Where a task starts: from the positions of the checkpoint it restores, if
// any; otherwise from [Config.Start], resolved to a concrete offset when the
// reader opens, so that a checkpoint taken before the first record pins a
// position instead of "latest" meaning something else on restore. A restored
// offset that is no longer in the log (retention deleted it, the log was
// truncated) fails the task with [ErrLogLost] rather than silently skipping
// data.
//
// Positions record their topic's layout (topic id, partition count) and the
// leader epoch of the last record returned. A restore refuses a topic whose
// id or count differs from its checkpoint's with a
// [checkpoint.LayoutError] (deleted and recreated, partitions added: the
// offsets and keyed state belong to the old layout), and resumes in the
// recorded leader epoch, so that franz-go detects a log truncated below the
// position since (KIP-320). Positions of earlier versions, without a layout,
// are restored unchecked, with a warning.
//
// Records that fail to decode go to a dead-letter topic or fail the task, as
// configured; never a silent drop. Dead-lettering is at-least-once: the
// record is produced synchronously before its offset counts as consumed, so a
// crash between the two may dead-letter it again after restore.
//
// Kafka's committed group offsets are written only for lag monitoring
// ([Committer], after a checkpoint completes). They are never read back: the
// checkpoint is the source of truth.
//
// Duties of the caller: call [Kafka] once per source with a valid [Config];
// make the task count of the job equal to [PartitionCount] of its input
// topics; create the dead-letter topic before the job starts (a missing one is
// refused at open); call a [Committer] on checkpoint completion if lag should
// be visible to Kafka tooling.
package source
