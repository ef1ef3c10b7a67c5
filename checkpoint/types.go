package checkpoint

import (
	"encoding/json"
	"time"
)

// ID numbers the checkpoints of one task. IDs only grow, also across restarts:
// a restarted task continues after the highest ID it finds in storage, whether
// that checkpoint completed or not.
type ID uint64

// FileRef names one file of a state snapshot in checkpoint storage.
type FileRef struct {
	// Name is the object name relative to the storage root.
	Name string `json:"name"`
	// Local is the file's name inside the operator's snapshot (for Pebble, the
	// name inside the DB directory); it is how a restore lays files out again.
	Local string `json:"local,omitempty"`
	Size  int64  `json:"size"`
	// CRC32C is the file's CRC-32C (Castagnoli), 8 hex digits. References
	// written by earlier versions carry SHA256 instead (64 hex digits).
	CRC32C string `json:"crc32c,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Shared files (immutable SSTs) may be referenced by several manifests.
	Shared bool `json:"shared,omitempty"`
}

// StateHandle is what an operator's state snapshot left in storage.
type StateHandle struct {
	// Backend names the state backend that wrote it ("memory", "pebble").
	Backend string    `json:"backend"`
	Files   []FileRef `json:"files,omitempty"`
	// Size is the full size of the snapshot and Incremental the bytes this
	// checkpoint uploaded anew.
	Size        int64 `json:"size"`
	Incremental int64 `json:"incremental"`
}

// SourcePosition is the position of the next record a source would emit for
// one of its splits (for Kafka: topic and partition; Offset the next offset).
type SourcePosition struct {
	Source    string `json:"source"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// MaxTimestamp is the highest event time (Unix ms) the split's records
	// had up to Offset, when the source derives watermarks: the restored
	// source starts its watermark from it rather than from nothing.
	MaxTimestamp *int64 `json:"max_timestamp,omitempty"`
	// TopicID and Partitions are the layout of Topic as the source saw it
	// when it opened: its Kafka topic id (KIP-516, empty where the broker
	// has none) and its partition count. A restore refuses a topic
	// recreated under the same name (another id) or with another count
	// (ErrLayoutChanged): the offsets and the keyed state of the checkpoint
	// belong to the layout it was taken under. Manifests of earlier
	// versions have neither, and are restored unchecked.
	TopicID    string `json:"topic_id,omitempty"`
	Partitions int32  `json:"partitions,omitempty"`
	// LeaderEpoch is the leader epoch of the record before Offset, when
	// the source consumed one: a restore resumes at Offset in that epoch,
	// so that Kafka can tell whether the log was truncated below it since
	// (KIP-320). A pointer, since 0 is an epoch.
	LeaderEpoch *int32 `json:"leader_epoch,omitempty"`
	// Upstream holds, for a split whose records carry their watermarks
	// (a repartition topic, written by the N tasks upstream), the last
	// watermark each upstream task wrote into it up to Offset: element i
	// is task i's.
	Upstream []UpstreamWatermark `json:"upstream,omitempty"`
}

// UpstreamWatermark is the last watermark one upstream task wrote into a
// split.
type UpstreamWatermark struct {
	// Watermark is in Unix ms; math.MinInt64: none yet.
	Watermark int64 `json:"watermark"`
	// Idle: the task's input was idle (see runtime.WatermarkStrategy).
	Idle bool `json:"idle,omitempty"`
}

// Committable is a pre-committed transaction a sink will commit once the
// checkpoint that holds it completes.
type Committable struct {
	Operator        string `json:"operator"`
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	Epoch           int16  `json:"epoch"`
	// Data carries what a non-Kafka sink needs to commit (tests use it).
	Data json.RawMessage `json:"data,omitempty"`
	// Record is where one record of the transaction landed: evidence, in
	// the output's own log, of what became of it, for when the
	// coordinator's record no longer tells (the id was re-initialised
	// after the transaction ended). Not part of the transaction's Key.
	Record RecordAt `json:"record,omitzero"`
}

// RecordAt is the position of one record in a Kafka topic.
type RecordAt struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Ack is one participant's acknowledgement of a checkpoint: its share of the
// manifest. A participant is an operator of the task (sources and sinks too).
type Ack struct {
	Operator     string           `json:"operator"`
	State        *StateHandle     `json:"state,omitempty"`
	Sources      []SourcePosition `json:"sources,omitempty"`
	Committables []Committable    `json:"committables,omitempty"`
	// Committed are transactions the operator (a sink) committed, or
	// its recovery committed, that no completed checkpoint of its owner
	// recorded yet: checkpoint storage's own evidence that their output
	// is visible. A sink keeps reporting one until a checkpoint that
	// reported it completes, and it reuses the transactional id only
	// after that, so the coordinator's record of the commit outlives
	// nothing that restore needs. Restore trusts this record over the
	// coordinator's, which the broker may have dropped (an expired
	// transactional id) or overwritten (a re-initialised id).
	Committed []Committable `json:"committed,omitempty"`
	// Alignment is how long the operator's inputs were blocked aligning.
	Alignment time.Duration `json:"alignment_ns,omitempty"`
	// Watermark is the operator's event time at the barrier (Unix ms), if
	// it has one: a restored operator starts from it, so that records
	// replayed after a restore meet the event time they met before.
	Watermark *int64 `json:"watermark,omitempty"`
	// Schema says what the operator's State means: each state it declared
	// with its kind and codecs, its key's codec ("key"), a window's
	// assigner ("window"). A restore refuses State whose job reads it as
	// another thing (a changed codec decodes the old bytes into wrong
	// values, or finds none of its keys). Checkpoints of before it have
	// none, and are not checked.
	Schema map[string]string `json:"schema,omitempty"`
}

// FormatVersion is the manifest format this code writes and reads.
const FormatVersion = 1

// Manifest is the commit point of one checkpoint of one task. It is written
// once, atomically, and never rewritten.
type Manifest struct {
	Version    int       `json:"version"`
	Job        string    `json:"job"`
	Task       int       `json:"task"`
	Checkpoint ID        `json:"checkpoint"`
	Timestamp  time.Time `json:"timestamp"`
	// Epoch is the owner's fencing epoch: a restore never takes a manifest of
	// a zombie owner for its own (see DESIGN.md, Fencing).
	Epoch     int64 `json:"epoch"`
	Operators []Ack `json:"operators"`
}
