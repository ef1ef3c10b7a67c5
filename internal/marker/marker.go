// Package marker is the watermark marker of weir's repartition topics.
//
// Each task upstream of a repartition topic writes, at every checkpoint
// its watermark moved since the last, one marker into every partition of
// the topic, inside the checkpoint's transaction and after its records:
// the task's watermark (and whether its input is idle). A task downstream
// reads one partition, which interleaves the records of all N tasks
// upstream; its watermark is the least of the last marker of each, idle
// ones left out, and nothing until every task has written one. A record
// of task u comes after u's earlier markers and, unless it was late
// upstream already, is newer than all of them: it is never late
// downstream. Markers written in a transaction that aborts are never
// read, as the records they follow.
package marker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header is the header key that tells a marker from a record; the
// marker is in the value.
const Header = "weir.watermark"

// version is the first byte of a marker's value.
const version = 1

// Mark is one task's watermark, as its marker carries it.
type Mark struct {
	Task   int   // the task that wrote it
	Tasks  int   // how many tasks write into the topic
	Millis int64 // Unix ms; math.MinInt64: none yet, math.MaxInt64: the end
	Idle   bool
}

// Record is the marker of m for partition p of topic.
func Record(topic string, p int32, m Mark) *kgo.Record {
	v := make([]byte, 0, 24)
	v = append(v, version)
	v = binary.AppendUvarint(v, uint64(m.Task))
	v = binary.AppendUvarint(v, uint64(m.Tasks))
	v = binary.BigEndian.AppendUint64(v, uint64(m.Millis))
	idle := byte(0)
	if m.Idle {
		idle = 1
	}
	v = append(v, idle)
	return &kgo.Record{Topic: topic, Partition: p, Value: v, Headers: []kgo.RecordHeader{{Key: Header}}}
}

// Is says whether r is a marker.
func Is(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == Header {
			return true
		}
	}
	return false
}

// Decode reads a marker's value.
func Decode(v []byte) (Mark, error) {
	if len(v) == 0 || v[0] != version {
		return Mark{}, errors.New("watermark marker: unknown version")
	}
	v = v[1:]
	task, n := binary.Uvarint(v)
	if n <= 0 {
		return Mark{}, errors.New("watermark marker: bad task")
	}
	v = v[n:]
	tasks, n := binary.Uvarint(v)
	if n <= 0 {
		return Mark{}, errors.New("watermark marker: bad task count")
	}
	v = v[n:]
	if len(v) != 9 || v[8] > 1 {
		return Mark{}, errors.New("watermark marker: bad watermark")
	}
	if tasks == 0 || tasks > math.MaxInt32 || task >= tasks {
		return Mark{}, fmt.Errorf("watermark marker: task %d of %d", task, tasks)
	}
	return Mark{Task: int(task), Tasks: int(tasks), Millis: int64(binary.BigEndian.Uint64(v)), Idle: v[8] == 1}, nil
}

// Partitioner puts each marker in the partition it names, and every
// other record where franz-go's default for keyed records does (the
// murmur2 hash of its key, as Kafka's Java producer), a nil key hashed
// as an empty one.
func Partitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		keyed := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
		return func(r *kgo.Record, n int) int {
			if r.Key == nil {
				if Is(r) {
					return int(r.Partition)
				}
				r.Key = []byte{} // an empty key, hashed as one
			}
			return keyed.Partition(r, n)
		}
	})
}
