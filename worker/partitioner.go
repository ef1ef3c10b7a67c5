package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
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

// checkPartitioner holds job to one partitioner for good: a key's state is
// in the task the partitioner chose when the state was written, and
// another would send the key's next records (through the input's
// producers and every KeyBy) to another task, where its state starts
// over, without a word. The first start of the job records name; a start
// with another refuses, naming --partitioner. A job with checkpoints from
// before the record gets it as it is now, with a warning.
func checkPartitioner(ctx context.Context, st checkpoint.Storage, job, name string, log *slog.Logger) error {
	for range 2 {
		switch rec, err := checkpoint.ReadPartitioner(ctx, st, job); {
		case err == nil && rec == name:
			return nil
		case err == nil:
			return cli.UsageError{Err: fmt.Errorf("--partitioner %s: job %s's state was keyed with %s (%s): "+
				"keys would go to other tasks than their state, which would start over; run it with --partitioner %s, "+
				"or start it afresh under a new --name", name, job, rec, checkpoint.PartitionerName(job), rec)}
		case !errors.Is(err, checkpoint.ErrNotFound):
			return err
		}
		history, err := checkpoint.HasCheckpoints(ctx, st, job)
		if err != nil {
			return err
		}
		switch err := checkpoint.WritePartitioner(ctx, st, job, name); {
		case errors.Is(err, checkpoint.ErrExists):
			continue // another worker recorded it: compare with that
		case err != nil:
			return err
		}
		if history {
			log.Warn("the job has checkpoints but no record of its partitioner (they were written by an earlier version): "+
				"recording --partitioner as it is now; a change made before now cannot be told",
				"partitioner", name, "record", checkpoint.PartitionerName(job))
		}
		return nil
	}
	return fmt.Errorf("record the partitioner of %s: written and not found", job)
}
