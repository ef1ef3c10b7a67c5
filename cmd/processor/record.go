package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/worker"
)

// `processor checkpoints record` writes, into checkpoint storage, what
// became of the transactions of one checkpoint that the broker no longer
// remembers and no later checkpoint recorded (a restore refuses such a
// checkpoint: "neither the broker nor checkpoint storage keeps a record").
// With --outcome it records what a person found; without, it looks for each
// transaction's records in the topics its sinks write (read_committed, by
// producer id and epoch, which Kafka keeps with every record batch):
// found is committed; not found is aborted only where the topics still
// hold everything ever written to them (log start offset 0), since
// retention may have deleted a committed transaction's records.

type recordConfig struct {
	checkpointsConfig
	Outcome  string // committed, aborted, or "" to find out
	Brokers  []string
	Topics   []string
	Security worker.Security
}

const (
	outcomeCommitted = "committed"
	outcomeAborted   = "aborted"
)

func (c *recordConfig) validate() error {
	errs := []error{c.checkpointsConfig.validate(true)}
	switch c.Outcome {
	case outcomeCommitted, outcomeAborted:
	case "":
		if len(c.Topics) == 0 || len(c.Brokers) == 0 {
			errs = append(errs, errors.New("--outcome: not set, so --brokers and --topics are required: the topics the job's sinks write "+
				"(its output topics, and its repartition topics <name>-<operator>-repartition), where the transactions' records are looked for"))
		}
		errs = append(errs, c.Security.Validate())
	default:
		errs = append(errs, fmt.Errorf("--outcome: %q, want committed or aborted (or leave it out to look for the records)", c.Outcome))
	}
	return errors.Join(errs...)
}

func recordCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	c := recordConfig{checkpointsConfig: checkpointsConfig{Checkpoints: worker.DefaultConfig().Checkpoints, Task: -1}}
	fs := cli.NewFlagSet("processor checkpoints record",
		"Record in checkpoint storage what became of the transactions of one checkpoint that the broker forgot\n"+
			"(transactional.id.expiration.ms) and no later checkpoint recorded, so that a restore can go on:\n"+
			"--outcome committed or aborted, or --brokers and --topics to look for their records.", stderr)
	c.registerStorage(fs)
	fs.IntVar(&c.Task, "task", c.Task, "task (input partition) of the checkpoint (required)")
	fs.StringVar(&c.ID, "id", c.ID, "checkpoint id, or latest (required): the one the restore refused")
	fs.StringVar(&c.Outcome, "outcome", c.Outcome, "committed or aborted: what you found; empty: look for the records in --topics")
	fs.Var(cli.List{V: &c.Brokers}, "brokers", "Kafka bootstrap addresses, comma-separated (to look for the records)")
	fs.Var(cli.List{V: &c.Topics}, "topics", "the topics the job's sinks write, comma-separated (to look for the records)")
	c.Security.RegisterFlags(fs)
	if err := cli.Parse(fs, args, lookup); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	st, err := openStorage(ctx, c.Checkpoints)
	if err != nil {
		return err
	}
	job := c.name()
	l, err := checkpoint.ListTask(ctx, st, job, c.Task)
	if err != nil {
		return err
	}
	id, latest, _ := c.id()
	if latest {
		if len(l.Completed) == 0 {
			return fmt.Errorf("task %d of job %q has no completed checkpoints in %s", c.Task, job, c.Checkpoints)
		}
		id = l.Completed[len(l.Completed)-1]
	}
	var ms []checkpoint.Manifest
	var m *checkpoint.Manifest
	for _, mid := range l.Completed {
		mm, err := checkpoint.ReadManifest(ctx, st, job, c.Task, mid)
		if err != nil {
			return err
		}
		ms = append(ms, mm)
		if mid == id {
			m = &ms[len(ms)-1]
		}
	}
	if m == nil {
		return fmt.Errorf("checkpoint %d of job %q task %d not found in %s (%s)", id, job, c.Task, c.Checkpoints, completedText(l.Completed))
	}
	recorded, err := checkpoint.ReadRecorded(ctx, st, job, c.Task, ms, l.CommitRecords)
	if err != nil {
		return err
	}
	var open []checkpoint.Committable
	for _, a := range m.Operators {
		for _, cm := range a.Committables {
			if !recorded.Knows(cm) {
				open = append(open, cm)
			}
		}
	}
	if len(open) == 0 {
		fmt.Fprintf(stdout, "checkpoint %d of task %d: storage records what became of every transaction it names; nothing to record\n", id, c.Task)
		return nil
	}
	r := checkpoint.CommitRecord{Job: job, Task: c.Task, Checkpoint: id, Epoch: m.Epoch, Timestamp: time.Now().UTC()}
	switch c.Outcome {
	case outcomeCommitted:
		r.Committed, r.By = open, "processor checkpoints record --outcome committed"
	case outcomeAborted:
		r.Aborted, r.By = open, "processor checkpoints record --outcome aborted"
	default:
		opts, err := c.Security.ClientOpts()
		if err != nil {
			return cli.UsageError{Err: err}
		}
		found, complete, err := findTransactions(ctx, c.Brokers, c.Topics, open, opts...)
		if err != nil {
			return c.Security.ExplainKafkaErr(err)
		}
		for _, cm := range open {
			fmt.Fprintf(stdout, "transaction %s (producer %d, epoch %d) of sink %s: %d records in %s\n",
				cm.TransactionalID, cm.ProducerID, cm.Epoch, cm.Operator, found[cm.Key()], strings.Join(c.Topics, ", "))
			switch {
			case found[cm.Key()] > 0:
				r.Committed = append(r.Committed, cm)
			case complete:
				r.Aborted = append(r.Aborted, cm)
			}
		}
		if len(r.Committed)+len(r.Aborted) < len(open) {
			return errors.New("not every transaction's records were found, and the topics no longer hold everything written to them " +
				"(retention moved their log start): whether the others were aborted or their records deleted cannot be told. " +
				"Record what you know with --outcome, or start the job afresh (docs/operating.md)")
		}
		r.By = "processor checkpoints record: looked for the records in " + strings.Join(c.Topics, ", ")
	}
	attempt := "record-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := checkpoint.WriteCommitRecord(ctx, st, r, attempt); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recorded for checkpoint %d of task %d: %d committed, %d aborted (%s)\n",
		id, c.Task, len(r.Committed), len(r.Aborted), checkpoint.CommitRecordName(job, c.Task, id, r.Epoch, attempt))
	return nil
}

// findTransactions counts, per transaction of want, the records of its
// producer id and epoch in topics, read read_committed (so an aborted
// transaction's records do not count). complete says whether the topics
// still hold everything written to them: every partition's log start
// offset is 0.
func findTransactions(ctx context.Context, brokers, topics []string, want []checkpoint.Committable, opts ...kgo.Opt) (found map[checkpoint.TxnKey]int, complete bool, err error) {
	type producer struct {
		id    int64
		epoch int16
	}
	of := map[producer]checkpoint.TxnKey{}
	for _, c := range want {
		of[producer{c.ProducerID, c.Epoch}] = c.Key()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, false, err
	}
	defer cl.Close()
	// Records name their transaction by producer id and epoch only where
	// each transaction has an epoch of its own (transaction version 2).
	// Before, a producer's transactions share one until its id is
	// initialised again, and an aborted transaction would be taken for
	// committed by the records of an earlier one.
	switch tv, err := sink.TransactionVersion(ctx, cl); {
	case err != nil:
		return nil, false, err
	case tv < 2:
		return nil, false, fmt.Errorf("the cluster runs transaction version %d, where a producer's transactions share an epoch: "+
			"their records cannot tell which transaction they are of. Record what you know with --outcome", tv)
	}
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, false, fmt.Errorf("start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	complete = true
	starts.Each(func(o kadm.ListedOffset) { complete = complete && o.Offset == 0 })
	found = map[checkpoint.TxnKey]int{}
	for _, topic := range topics {
		recs, _, err := readCommitted(ctx, brokers, topic, opts...)
		if err != nil {
			return nil, false, err
		}
		for _, r := range recs {
			if k, ok := of[producer{r.ProducerID, r.ProducerEpoch}]; ok {
				found[k]++
			}
		}
	}
	return found, complete, nil
}
