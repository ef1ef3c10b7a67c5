package worker

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/marker"
	"github.com/weirstream/weir/internal/partition"
)

// partitioner is the partitioner of the input's producers (--partitioner,
// validated): the one of every topic the job reads. A job has one, so that
// a key is in the same task in each topic: the internal topics are
// written with it too (repartitioner), and a key repartitioned meets the
// input's records of that key, as in a join of the two.
func (c *Config) partitioner() partition.Partitioner {
	p, err := partition.Parse(c.Partitioner)
	if err != nil {
		return partition.Murmur2 // Validate refuses it
	}
	return p
}

// repartitioner places the records of a repartition topic by p, as the
// input's producers place their keys (a nil key hashed as an empty one),
// and each watermark marker in the partition it names (see
// internal/marker). With murmur2 it places them as marker.Partitioner,
// the sink's own for a topic with watermarks, does.
func repartitioner(p partition.Partitioner) kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if r.Key == nil && marker.Is(r) {
				return int(r.Partition)
			}
			return p.Partition(r.Key, n)
		}
	})
}
