package worker

import (
	"errors"
	"flag"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/sink"
)

// Memory bounds the records a worker's tasks hold in memory on their way
// from the input to the output; keyed state has its own settings
// (--state-memtable-size, --state-cache-size). A task's consumer, and the
// one the tasks from the 8th on share, buffer --fetch-max-bytes each (one
// fetch at a time, each taking at most --fetch-max-partition-bytes of a
// partition, or one batch if larger). Per task, about:
//
//	queue:     4 × --fetch-max-partition-bytes of its partitions' records
//	           fetched and not yet read, in a shared consumer (then they
//	           are paused), plus the fetch that fills it
//	in flight: --batch-size records per poll, and per input of a
//	           multi-input operator --channel-capacity batches of them
//	output:    --producer-buffer-bytes (or --producer-buffer-records) not
//	           yet acknowledged by the brokers
//
// A full buffer blocks the task, so a slow output slows the reading of the
// input instead of growing the buffers. The zero value is not valid:
// DefaultMemory has the defaults.
type Memory struct {
	// BatchSize is how many records a source returns per poll and a
	// channel between a task's goroutines carries per send. Default 512.
	BatchSize int
	// ChannelCapacity is how many batches each input channel of a
	// multi-input operator (union, connect, join) holds. Default 4.
	ChannelCapacity int
	// FetchMaxBytes bounds one fetch of a task's Kafka consumer, or of
	// the one the tasks from the 8th on share (Kafka's
	// fetch.max.bytes). Default 16 MiB; at most 64 MiB (franz-go reads
	// responses of up to 100 MiB).
	FetchMaxBytes int64
	// FetchMaxPartitionBytes bounds what one fetch takes of a partition
	// (Kafka's max.partition.fetch.bytes); a record batch larger than it
	// still comes whole. Default 1 MiB.
	FetchMaxPartitionBytes int64
	// MaxRecordBytes is the largest input record (key, value and
	// headers) the job processes: a larger one is a bad record, dead-
	// lettered or failing the task as --on-decode-error says. Default
	// 1 MiB.
	MaxRecordBytes int64
	// ProducerBatchMaxBytes bounds a record batch the worker writes to the
	// output and repartition topics (Kafka's batch.size and the topic's
	// max.message.bytes): a record that does not fit fails the task,
	// naming it. Default 1,000,012 (Kafka's default max.message.bytes).
	ProducerBatchMaxBytes int64
	// ProducerBufferBytes and ProducerBufferRecords bound what a task's
	// producer holds that the brokers have not acknowledged (Kafka's
	// buffer.memory); when full, writing waits. Defaults 32 MiB and
	// 10,000 records.
	ProducerBufferBytes   int64
	ProducerBufferRecords int
	// InFlightRecords bounds the records the worker's exactly-once sinks
	// hold unacknowledged, all its tasks together: each sink writer
	// keeps to an even share of it (at least sink.MinInFlightShare), and
	// to ProducerBufferRecords. Default 160,000: up to 16 writers a
	// worker, each may hold its whole producer buffer; at 64, 2,500 each.
	// Records in flight are live objects every garbage collection marks.
	InFlightRecords int64
}

// DefaultMemory returns the default memory bounds.
func DefaultMemory() Memory {
	return Memory{
		BatchSize:              512,
		ChannelCapacity:        4,
		FetchMaxBytes:          16 << 20,
		FetchMaxPartitionBytes: 1 << 20,
		MaxRecordBytes:         1 << 20,
		ProducerBatchMaxBytes:  sink.DefaultMaxRecordBytes,
		ProducerBufferBytes:    32 << 20,
		ProducerBufferRecords:  10_000,
		InFlightRecords:        160_000,
	}
}

// Limits franz-go puts on its settings.
const (
	maxFetchBytes      = 64 << 20 // under its 100 MiB BrokerMaxReadBytes
	minProducerBatch   = 512
	maxProducerBatch   = 1 << 30
	maxBatchSize       = 1 << 20
	maxChannelCapacity = 1 << 16
)

// RegisterFlags binds m's fields to fs; the values in m are the defaults.
func (m *Memory) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&m.BatchSize, "batch-size", m.BatchSize, "records per poll of the input and per batch between a task's goroutines")
	fs.IntVar(&m.ChannelCapacity, "channel-capacity", m.ChannelCapacity, "batches each input of a multi-input operator (union, connect, join) holds")
	fs.Var(cli.Bytes{V: &m.FetchMaxBytes}, "fetch-max-bytes", "most bytes of one fetch of a task's consumer, or of the one the tasks from the 8th on share (fetch.max.bytes)")
	fs.Var(cli.Bytes{V: &m.FetchMaxPartitionBytes}, "fetch-max-partition-bytes", "most bytes one fetch takes of a partition, unless a single batch is larger (max.partition.fetch.bytes)")
	fs.Var(cli.Bytes{V: &m.MaxRecordBytes}, "max-record-bytes", "largest input record (key, value, headers) the job processes; larger ones are bad records (--on-decode-error)")
	fs.Var(cli.Bytes{V: &m.ProducerBatchMaxBytes}, "producer-batch-max-bytes", "largest record batch written to the output and repartition topics, so the largest output record (at most the topics' max.message.bytes)")
	fs.Var(cli.Bytes{V: &m.ProducerBufferBytes}, "producer-buffer-bytes", "most bytes a task's producer holds unacknowledged; writing waits when full (buffer.memory)")
	fs.IntVar(&m.ProducerBufferRecords, "producer-buffer-records", m.ProducerBufferRecords, "most records a task's producer holds unacknowledged; writing waits when full")
	fs.Int64Var(&m.InFlightRecords, "inflight-records", m.InFlightRecords,
		"most records the worker's exactly-once sinks hold unacknowledged, all tasks together; each sink of a task keeps to an even share (at least 1000)")
}

// Validate reports every bad bound, joined, each naming its flag.
func (m *Memory) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if m.BatchSize < 1 || m.BatchSize > maxBatchSize {
		bad("batch-size", "%d, want 1 to %d records", m.BatchSize, maxBatchSize)
	}
	if m.ChannelCapacity < 1 || m.ChannelCapacity > maxChannelCapacity {
		bad("channel-capacity", "%d, want 1 to %d batches", m.ChannelCapacity, maxChannelCapacity)
	}
	if m.FetchMaxBytes < 1 || m.FetchMaxBytes > maxFetchBytes {
		bad("fetch-max-bytes", "%d, want 1 byte to 64MiB", m.FetchMaxBytes)
	}
	if m.FetchMaxPartitionBytes < 1 || m.FetchMaxPartitionBytes > m.FetchMaxBytes && m.FetchMaxBytes > 0 {
		bad("fetch-max-partition-bytes", "%d, want 1 byte to --fetch-max-bytes %d", m.FetchMaxPartitionBytes, m.FetchMaxBytes)
	}
	if m.MaxRecordBytes < 1 {
		bad("max-record-bytes", "%d, want more than 0", m.MaxRecordBytes)
	}
	if m.ProducerBatchMaxBytes < minProducerBatch || m.ProducerBatchMaxBytes > maxProducerBatch {
		bad("producer-batch-max-bytes", "%d, want 512 bytes to 1GiB", m.ProducerBatchMaxBytes)
	}
	if m.ProducerBufferBytes < m.ProducerBatchMaxBytes {
		bad("producer-buffer-bytes", "%d, want at least --producer-batch-max-bytes %d (a record larger than the buffer is never written)",
			m.ProducerBufferBytes, m.ProducerBatchMaxBytes)
	}
	if m.ProducerBufferRecords < 1 {
		bad("producer-buffer-records", "%d, want more than 0", m.ProducerBufferRecords)
	}
	if m.InFlightRecords < sink.MinInFlightShare {
		bad("inflight-records", "%d, want at least %d (a sink's least share)", m.InFlightRecords, sink.MinInFlightShare)
	}
	return errors.Join(errs...)
}

// sourceOpts are the Kafka options of the tasks' consumers. Their producer
// only writes dead letters: a record as large as the input holds, which the
// dead-letter topic's max.message.bytes must allow, so the client's own
// limit is as large as franz-go lets it be (under the 100 MiB it writes to
// a broker at most, which bounds what it reads, so the input, too).
func (m *Memory) sourceOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchMaxBytes(int32(m.FetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(m.FetchMaxPartitionBytes)),
		kgo.ProducerBatchMaxBytes(deadLetterBatchBytes),
	}
}

// queueBytes bounds a reader's queue in its source's shared consumer
// before its partition is paused: four partition fetches.
func (m *Memory) queueBytes() int64 { return 4 * m.FetchMaxPartitionBytes }

// deadLetterBatchBytes is the batch limit of the dead-letter producer.
const deadLetterBatchBytes = 96 << 20

// sinkOpts are the Kafka options of the tasks' producers, besides the
// batch limit the sink sets (sink.Config.MaxRecordBytes).
func (m *Memory) sinkOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.MaxBufferedBytes(int(m.ProducerBufferBytes)),
		kgo.MaxBufferedRecords(m.ProducerBufferRecords),
	}
}

// checkRecord returns the error that makes an input record over
// MaxRecordBytes a bad record; the source adds where it is.
func (m *Memory) checkRecord(r *kgo.Record) error {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	if int64(n) > m.MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes (key, value and headers), over --max-record-bytes %d", ErrRecordTooLarge, n, m.MaxRecordBytes)
	}
	return nil
}

// ErrRecordTooLarge is wrapped by the error of an input record over
// --max-record-bytes, and by that of an output record over
// --producer-batch-max-bytes or the topic's max.message.bytes.
var ErrRecordTooLarge = errors.New("record too large")
