package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/source"
)

// A job's layout is the partition count and topic id of each topic its
// tasks read: the input and the internal (repartition) topics. Keyed state
// and checkpointed offsets belong to one layout, so a job never processes
// another: the worker records the layout when this incarnation of the job
// first starts (checkpoint.Layout, in checkpoint storage), compares the
// live one with it at every start, every rebalance and every
// --layout-check-interval, and stops the job on a difference. Each task's
// manifests record the layout too (source positions), which a restore
// checks; the job's record covers what a task cannot know, such as a
// partition added while the job ran (its task has no checkpoint).

// Reasons for which a job stops on a worker: the reason label of
// weir_job_stopped.
const (
	reasonPartitionsChanged   = string(checkpoint.ChangePartitions)
	reasonTopicRecreated      = string(checkpoint.ChangeRecreated)
	reasonTopicDeleted        = string(checkpoint.ChangeDeleted)
	reasonPartitionCounts     = "partition_counts_differ"
	reasonInternalTopicInUse  = "internal_topic_not_empty"
	reasonLayoutChangedOther  = "layout_changed"
	layoutAdviceTopicsChanged = "A changed layout is never processed: the job's keyed state and checkpointed offsets belong to the " +
		"layout they were taken under, and Kafka cannot take partitions away or bring a deleted topic back. Either rescale the " +
		"job's state to the new layout with `processor rescale` (in a later release), or start the job afresh under a new " +
		"--name, accepting that its state starts empty. This worker stays stopped until it is stopped (SIGTERM); " +
		"docs/operating.md, \"The topics' layout changed\""
)

// stopReasons are the reasons weir_job_stopped reports, 0 until one holds.
var stopReasons = []string{reasonPartitionsChanged, reasonTopicRecreated, reasonTopicDeleted,
	reasonPartitionCounts, reasonInternalTopicInUse, reasonLayoutChangedOther}

// stopError is why the job stops on this worker for good: its topics are
// not what its checkpoints and layout record say, which no restart mends.
type stopError struct {
	reason string
	err    error
}

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// stopReason is the reason label of err, an error that stops the job.
func stopReason(err error) string {
	var se *stopError
	if errors.As(err, &se) {
		return se.reason
	}
	var le *checkpoint.LayoutError
	if errors.As(err, &le) {
		return string(le.Kind())
	}
	return reasonLayoutChangedOther
}

// layoutGuard compares the layout of the job's topics with its record. Its
// methods may be called from several goroutines (the watch, the group's
// callbacks) once start returned.
type layoutGuard struct {
	job      string
	st       checkpoint.Storage
	cl       *kgo.Client
	adm      *kadm.Client
	log      *slog.Logger
	inputs   []string
	internal []string
	// reset is the command line that deletes a topic, for the errors;
	// setTimestamps the one that makes it keep its records' timestamps.
	reset, setTimestamps func(topic string) string
	// storage names the checkpoint storage, for the errors.
	storage string

	// want is the layout the job runs on: its record, and the topics the
	// record lacks (internal topics of a stage added since) as start
	// found them. Set by start, read only after.
	want checkpoint.Layout
	// partitions is the job's partition count: the number of its tasks.
	partitions int32
}

// newLayoutGuard returns the guard of c's job, which reads inputs and
// whose internal topics are internal; close it when done.
func newLayoutGuard(c *Config, st checkpoint.Storage, inputs, internal []string, kafka []kgo.Opt, log *slog.Logger) (*layoutGuard, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, kafka...)...)
	if err != nil {
		return nil, err
	}
	brokers := strings.Join(c.Brokers, ",")
	return &layoutGuard{
		job: c.name(), st: st, cl: cl, adm: kadm.NewClient(cl), log: log,
		inputs: slices.Clone(inputs), internal: slices.Clone(internal),
		reset: func(topic string) string {
			return "kafka-topics.sh --bootstrap-server " + brokers + " --delete --topic " + topic
		},
		setTimestamps: func(topic string) string {
			return "kafka-configs.sh --bootstrap-server " + brokers + " --alter --entity-type topics --entity-name " + topic +
				" --add-config " + timestampType + "=CreateTime"
		},
		storage: c.Checkpoints,
	}, nil
}

func (g *layoutGuard) close() { g.cl.Close() }

func (g *layoutGuard) topics() []string { return append(slices.Clone(g.inputs), g.internal...) }

// start settles the layout the job runs on, before any task of this
// worker starts. With a layout record, that is the record, and the live
// layout must match it. Without one, this is a new incarnation of the job
// (or a job of an earlier version, which has checkpoints but no record):
// the worker creates the internal topics, checks that the job's topics
// share one partition count and, for a new incarnation, that no internal
// topic holds records of an earlier one, and records the layout. Workers
// that start a new incarnation together race on the record's conditional
// write; the loser takes the winner's. An error that must stop the job
// wraps checkpoint.ErrLayoutChanged or is a *stopError.
func (g *layoutGuard) start(ctx context.Context, partitions int32) error {
	rec, err := checkpoint.ReadLayout(ctx, g.st, g.job)
	if err == nil {
		return g.adopt(ctx, rec)
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return err
	}
	history, err := checkpoint.HasCheckpoints(ctx, g.st, g.job)
	if err != nil {
		return err
	}
	if err := g.createInternal(ctx, g.internal, partitions); err != nil {
		return err
	}
	if err := g.keepTimestamps(ctx); err != nil {
		return err
	}
	live, err := g.liveWait(ctx, g.internal)
	if err != nil {
		return err
	}
	for _, t := range live {
		if t.Partitions == 0 {
			return fmt.Errorf("topic %s: not in the brokers' metadata", t.Name)
		}
	}
	if err := sameCount(live); err != nil {
		return err
	}
	if history {
		g.log.Warn("the job has checkpoints but no layout record (they were written by an earlier version): "+
			"recording the topics' layout as it is now; changes made before now cannot be told",
			"record", checkpoint.LayoutName(g.job))
	} else if err := g.unused(ctx); err != nil {
		// A worker that started this incarnation a moment ago may have
		// written records already; it wrote the layout record before
		// them, so the record tells its records from an earlier run's.
		rec, rerr := checkpoint.ReadLayout(ctx, g.st, g.job)
		if rerr == nil {
			return g.adopt(ctx, rec)
		}
		if !errors.Is(rerr, checkpoint.ErrNotFound) {
			return rerr
		}
		return err
	}
	rec = checkpoint.Layout{Job: g.job, Created: time.Now().UTC(), Topics: live}
	switch err := checkpoint.WriteLayout(ctx, g.st, rec); {
	case errors.Is(err, checkpoint.ErrExists):
		if rec, err = checkpoint.ReadLayout(ctx, g.st, g.job); err != nil {
			return err
		}
		return g.adopt(ctx, rec)
	case err != nil:
		return err
	}
	g.log.Info("recorded the job's layout: a new incarnation of the job starts", "record", checkpoint.LayoutName(g.job), "topics", formatLayout(live))
	g.want, g.partitions = rec, live[0].Partitions
	return nil
}

// adopt takes rec, the job's layout record, as the layout to run on, if
// the live layout matches it. An internal topic the record lacks (a stage
// added since) is taken as recorded in its own record
// (checkpoint.AddedTopicName), or else created with the record's count,
// checked to hold nothing (it is read from its start: records of an
// earlier run, or of an earlier version of the job that had the stage,
// would be read as this run's own) and recorded before any task reads it.
// A recorded internal topic that is missing is not created again: it held
// records in flight, and the comparison reports it deleted.
func (g *layoutGuard) adopt(ctx context.Context, rec checkpoint.Layout) error {
	if len(rec.Topics) == 0 {
		return fmt.Errorf("layout record %s lists no topics", checkpoint.LayoutName(g.job))
	}
	n := rec.Topics[0].Partitions
	want := rec
	want.Topics = slices.Clone(rec.Topics)
	var added []string
	for _, t := range g.internal {
		if _, ok := rec.Topic(t); ok {
			continue
		}
		switch tl, ok, err := g.addedRecord(ctx, t); {
		case err != nil:
			return err
		case ok:
			want.Topics = append(want.Topics, tl)
		default:
			added = append(added, t)
		}
	}
	if err := g.createInternal(ctx, added, n); err != nil {
		return err
	}
	if err := g.keepTimestamps(ctx); err != nil {
		return err
	}
	live, err := g.liveWait(ctx, added)
	if err != nil {
		return err
	}
	if len(added) > 0 {
		held, err := g.held(ctx, added)
		if err != nil {
			return err
		}
		var used []string
		for _, t := range added {
			lt := live[slices.IndexFunc(live, func(l checkpoint.TopicLayout) bool { return l.Name == t })]
			if lt.Partitions == 0 {
				continue // the comparison reports it
			}
			tl := checkpoint.TopicLayout{Name: t, ID: lt.ID, Partitions: n}
			if held[t] > 0 {
				// Another worker may have recorded it a moment ago, and
				// its tasks written since.
				switch rtl, ok, err := g.addedRecord(ctx, t); {
				case err != nil:
					return err
				case ok:
					want.Topics = append(want.Topics, rtl)
				default:
					used = append(used, t)
				}
				continue
			}
			switch err := checkpoint.WriteAddedTopic(ctx, g.st, g.job, tl); {
			case errors.Is(err, checkpoint.ErrExists):
				if tl, err = checkpoint.ReadAddedTopic(ctx, g.st, g.job, t); err != nil {
					return err
				}
			case err != nil:
				return err
			default:
				g.log.Info("recorded an internal topic the job's layout record does not list (a stage added since)",
					"topic", t, "topic_id", tl.ID, "partitions", lt.Partitions, "record", checkpoint.AddedTopicName(g.job, t))
			}
			want.Topics = append(want.Topics, tl)
		}
		if len(used) > 0 {
			return g.inUse(used, held, fmt.Sprintf("which the job's layout record does not list (a stage added since the record of %s, "+
				"or added again after it was removed): the stage's readers start at the topic's start and would read them as this run's own",
				rec.Created.Format(time.RFC3339)))
		}
	}
	if err := g.compare(want, live); err != nil {
		return err
	}
	g.want, g.partitions = want, n
	return nil
}

// addedRecord reads the record of internal topic t that a worker wrote
// when t's stage was added (checkpoint.AddedTopicName); ok false if none.
func (g *layoutGuard) addedRecord(ctx context.Context, t string) (tl checkpoint.TopicLayout, ok bool, err error) {
	tl, err = checkpoint.ReadAddedTopic(ctx, g.st, g.job, t)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return tl, false, nil
	}
	return tl, err == nil, err
}

// check compares the live layout with the one the job runs on: nil, a
// layout error (the job must stop), or another error (Kafka did not
// answer: check again later). A topic missing from the metadata is asked
// for once more a second later before it counts as deleted: a broker that
// just started may not know every topic yet.
func (g *layoutGuard) check(ctx context.Context) error {
	live, err := g.live(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(live, func(t checkpoint.TopicLayout) bool { return t.Partitions == 0 }) {
		select { // pacing: metadata has no event to wait on
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		if live, err = g.live(ctx); err != nil {
			return err
		}
	}
	return g.compare(g.want, live)
}

func (g *layoutGuard) compare(want checkpoint.Layout, live []checkpoint.TopicLayout) error {
	err := want.Compare(live)
	var le *checkpoint.LayoutError
	if errors.As(err, &le) {
		le.Advice = layoutAdviceTopicsChanged
	}
	return err
}

// live returns the layout of the job's topics now; a topic that does not
// exist has 0 partitions. It asks a broker, not the client's metadata
// cache (kadm's ListTopics answers from it for a few seconds), and never
// has a topic created by asking.
func (g *layoutGuard) live(ctx context.Context) ([]checkpoint.TopicLayout, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	topics := g.topics()
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, g.cl)
	if err != nil {
		return nil, fmt.Errorf("layout of topics %s: %w", strings.Join(topics, ", "), err)
	}
	byName := make(map[string]kmsg.MetadataResponseTopic, len(resp.Topics))
	for _, rt := range resp.Topics {
		if rt.Topic != nil {
			byName[*rt.Topic] = rt
		}
	}
	out := make([]checkpoint.TopicLayout, 0, len(topics))
	for _, t := range topics {
		rt, ok := byName[t]
		err := kerr.ErrorForCode(rt.ErrorCode)
		switch {
		case !ok || errors.Is(err, kerr.UnknownTopicOrPartition):
			out = append(out, checkpoint.TopicLayout{Name: t})
		case err != nil:
			return nil, fmt.Errorf("layout of topic %s: %w", t, err)
		default:
			out = append(out, checkpoint.TopicLayout{Name: t, ID: source.TopicID(kadm.TopicID(rt.TopicID)), Partitions: int32(len(rt.Partitions))})
		}
	}
	return out, nil
}

// liveWait is live once the topics of created, just created, are in the
// brokers' metadata (they reach it a moment after their creation).
func (g *layoutGuard) liveWait(ctx context.Context, created []string) ([]checkpoint.TopicLayout, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		live, err := g.live(ctx)
		if err != nil {
			return nil, err
		}
		missing := slices.ContainsFunc(live, func(t checkpoint.TopicLayout) bool {
			return t.Partitions == 0 && slices.Contains(created, t.Name)
		})
		if !missing || time.Now().After(deadline) {
			return live, nil
		}
		select { // pacing: metadata has no event to wait on
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// createInternal creates the internal topics of topics that do not exist,
// with partitions partitions.
func (g *layoutGuard) createInternal(ctx context.Context, topics []string, partitions int32) error {
	if len(topics) == 0 {
		return nil
	}
	// Kept until deleted: records wait for a checkpoint's commit and may
	// carry old event times, which time-based retention would judge by.
	retention := "-1"
	// A record's event time crosses a KeyBy as its Kafka timestamp, which
	// a topic of LogAppendTime (a broker's default may be) replaces.
	createTime := "CreateTime"
	res, err := g.adm.CreateTopics(ctx, partitions, -1, map[string]*string{"retention.ms": &retention, timestampType: &createTime}, topics...)
	if err != nil {
		return fmt.Errorf("create internal topics %v: %w", topics, err)
	}
	var errs []error
	for _, r := range res.Sorted() {
		switch {
		case r.Err == nil:
			g.log.Info("created internal topic", "topic", r.Topic, "partitions", partitions, "topic_id", source.TopicID(r.ID))
		case !errors.Is(r.Err, kerr.TopicAlreadyExists):
			errs = append(errs, fmt.Errorf("create internal topic %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// timestampType is the topic setting that says whether the broker keeps
// a record's timestamp (CreateTime) or sets its own (LogAppendTime).
const timestampType = "message.timestamp.type"

// keepTimestamps checks that the job's internal topics that exist keep
// the timestamps written to them: the event time of a record crosses a
// KeyBy as its Kafka timestamp, and a topic of LogAppendTime would give
// every event-time operator after it the broker's clock instead, without
// a word. Internal topics weir creates are made CreateTime; one made
// otherwise (by hand, or by an older weir on a broker whose default is
// LogAppendTime) refuses the start, saying how to set it.
func (g *layoutGuard) keepTimestamps(ctx context.Context) error {
	if len(g.internal) == 0 {
		return nil
	}
	rcs, err := g.adm.DescribeTopicConfigs(ctx, g.internal...)
	if err != nil {
		return fmt.Errorf("settings of internal topics %v: %w", g.internal, err)
	}
	var bad []string
	for _, rc := range rcs {
		switch {
		case errors.Is(rc.Err, kerr.UnknownTopicOrPartition):
			continue // deleted: the layout's comparison says so
		case rc.Err != nil:
			return fmt.Errorf("settings of internal topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == timestampType && c.Value != nil && *c.Value != "CreateTime" {
				bad = append(bad, rc.Name)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	var b strings.Builder
	fmt.Fprintf(&b, "internal topics %s have %s other than CreateTime: the broker sets each record's timestamp, which carries "+
		"the record's event time across the job's KeyBy, to its own clock, and every event-time operator after it would see that instead. "+
		"Set it on each:", strings.Join(bad, ", "), timestampType)
	for _, t := range bad {
		b.WriteString("\n    " + g.setTimestamps(t))
	}
	return errors.New(b.String())
}

// unused checks that no internal topic holds a record (a watermark marker
// and a transaction marker count): in a new incarnation of the job, one
// would be an earlier run's, which the new run would read as its own.
func (g *layoutGuard) unused(ctx context.Context) error {
	if len(g.internal) == 0 {
		return nil
	}
	held, err := g.held(ctx, g.internal)
	if err != nil {
		return err
	}
	var used []string
	for _, t := range g.internal {
		if held[t] > 0 {
			used = append(used, t)
		}
	}
	if len(used) == 0 {
		return nil
	}
	return g.inUse(used, held, fmt.Sprintf("written by an earlier run of job %s, whose checkpoints are gone "+
		"(neither a checkpoint nor a layout record under --checkpoints %s, %s/): this run starts without a checkpoint "+
		"and would read them as its own, counting them twice", g.job, g.storage, g.job))
}

// held returns how many records (markers included) each of topics holds.
// Offsets are compared, not records read: any offset taken means the
// topic was written.
func (g *layoutGuard) held(ctx context.Context, topics []string) (map[string]int64, error) {
	starts, err := g.adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("start offsets of internal topics %v: %w", topics, err)
	}
	ends, err := g.adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of internal topics %v: %w", topics, err)
	}
	held := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && o.Offset > s.Offset {
			held[o.Topic] += o.Offset - s.Offset
		}
	})
	return held, nil
}

// inUse is the error that stops the job on internal topics used that hold
// records (held) the job must not read, why.
func (g *layoutGuard) inUse(used []string, held map[string]int64, why string) error {
	var b strings.Builder
	for i, t := range used {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "internal topic %s holds %d records", t, held[t])
	}
	fmt.Fprintf(&b, " (transaction and watermark markers included) %s. Reset the job's internal topics by deleting them:", why)
	for _, t := range used {
		b.WriteString("\n    " + g.reset(t))
	}
	b.WriteString("\nor run the job under a new --name (docs/operating.md, \"An internal topic holds an earlier run's records\")")
	return &stopError{reason: reasonInternalTopicInUse, err: errors.New(b.String())}
}

// sameCount checks that the job's topics have one partition count: task p
// reads partition p of each. A topic that does not exist is not counted.
func sameCount(live []checkpoint.TopicLayout) error {
	var counts []string
	var n int32
	same := true
	for _, t := range live {
		if t.Partitions == 0 {
			continue
		}
		if n == 0 {
			n = t.Partitions
		}
		counts = append(counts, t.Name+" has "+strconv.Itoa(int(t.Partitions)))
		same = same && t.Partitions == n
	}
	if same {
		return nil
	}
	return &stopError{reason: reasonPartitionCounts, err: fmt.Errorf("the job's topics have different partition counts (%s): "+
		"task p reads partition p of the input and of every internal topic, so all need one count. An internal topic of another "+
		"count is left from an earlier run of a job of this --name: delete it, or run the job under a new --name", strings.Join(counts, ", "))}
}

func formatLayout(ts []checkpoint.TopicLayout) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s(%d partitions, id %s)", t.Name, t.Partitions, t.ID)
	}
	return b.String()
}
