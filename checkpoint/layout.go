package checkpoint

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrLayoutChanged is wrapped by the errors of a task or a job whose topics
// are not laid out as when its checkpoints were taken: a topic has another
// partition count, or was deleted and recreated under its name. Keyed state
// and offsets belong to the layout they were taken under (a key's task is
// its partition, an offset names a record of one incarnation of a topic),
// so such a job must not go on: restarting it does not help either.
var ErrLayoutChanged = errors.New("the topics' layout differs from the checkpoint's")

// TopicLayout is one topic of a job as it is laid out.
type TopicLayout struct {
	Name string `json:"name"`
	// ID tells incarnations of a topic name apart (for Kafka, the topic
	// id of KIP-516); empty where unknown.
	ID string `json:"id,omitempty"`
	// Partitions is the topic's partition count; in a layout read from
	// the live system, 0 says the topic does not exist.
	Partitions int32 `json:"partitions"`
}

// Layout is a job's record of its topics, as the first run of this
// incarnation of the job found them (the incarnation being the job's
// checkpoints: a job started with empty checkpoint storage is a new one).
// It is written once, with Storage.PutIfAbsent, and never rewritten: the
// workers of the job compare the live layout with it at every start and
// while they run. It exists because a task that has no checkpoint yet (a
// task of a partition added while the job ran) cannot tell from its own
// history that the layout changed.
type Layout struct {
	Version int           `json:"version"`
	Job     string        `json:"job"`
	Created time.Time     `json:"created"`
	Topics  []TopicLayout `json:"topics"`
}

// layoutVersion is the layout record format this code writes and reads.
const layoutVersion = 1

// maxLayoutSize bounds what ReadLayout reads: a few topics' names and ids.
const maxLayoutSize = 1 << 20

// LayoutName is the object name of job's layout record.
func LayoutName(job string) string { return job + "/layout.json" }

// Topic returns the topic called name, false if the layout has none.
func (l Layout) Topic(name string) (TopicLayout, bool) {
	i := slices.IndexFunc(l.Topics, func(t TopicLayout) bool { return t.Name == name })
	if i < 0 {
		return TopicLayout{}, false
	}
	return l.Topics[i], true
}

// ReadLayout reads job's layout record; one that does not exist wraps
// ErrNotFound, one that does not parse wraps ErrCorrupt.
func ReadLayout(ctx context.Context, st Storage, job string) (Layout, error) {
	name := LayoutName(job)
	b, err := readRecord(ctx, st, name)
	if err != nil {
		return Layout{}, fmt.Errorf("read layout record %s: %w", name, err)
	}
	var l Layout
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&l); err != nil {
		return Layout{}, fmt.Errorf("read layout record %s: %w: %w", name, ErrCorrupt, err)
	}
	switch {
	case l.Version != layoutVersion:
		return Layout{}, fmt.Errorf("read layout record %s: unsupported format version %d (this build reads version %d)", name, l.Version, layoutVersion)
	case l.Job != job:
		return Layout{}, fmt.Errorf("read layout record %s: %w: it describes job %q", name, ErrCorrupt, l.Job)
	}
	return l, nil
}

// WriteLayout writes l as its job's layout record, unless one exists:
// then it returns ErrExists (another worker of the job wrote it first; read
// that one and compare).
func WriteLayout(ctx context.Context, st Storage, l Layout) error {
	l.Version = layoutVersion
	if !validJobName(l.Job) {
		return fmt.Errorf("write layout record: job name %q", l.Job)
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("write layout record %s: %w", LayoutName(l.Job), err)
	}
	if err := st.PutIfAbsent(ctx, LayoutName(l.Job), append(b, '\n')); err != nil {
		return fmt.Errorf("write layout record %s: %w", LayoutName(l.Job), err)
	}
	return nil
}

// StorageIDName is the object name of the identity of the checkpoint
// storage of job: a random id its first worker writes, which every worker
// that shares the storage reads back. Workers of one job that read
// different ids do not share checkpoints.
func StorageIDName(job string) string { return job + "/storage-id" }

// StorageID returns the identity of st for job, writing one if there is
// none yet.
func StorageID(ctx context.Context, st Storage, job string) (string, error) {
	name := StorageIDName(job)
	for range 2 {
		rc, err := st.Get(ctx, name)
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(rc, 256))
			rc.Close()
			if rerr != nil {
				return "", fmt.Errorf("read %s: %w", name, rerr)
			}
			if id := strings.TrimSpace(string(b)); id != "" {
				return id, nil
			}
			return "", fmt.Errorf("read %s: %w: empty", name, ErrCorrupt)
		}
		if !errors.Is(err, ErrNotFound) {
			return "", fmt.Errorf("read %s: %w", name, err)
		}
		var r [16]byte
		if _, err := crand.Read(r[:]); err != nil {
			return "", err
		}
		if err := st.PutIfAbsent(ctx, name, []byte(hex.EncodeToString(r[:])+"\n")); err != nil && !errors.Is(err, ErrExists) {
			return "", fmt.Errorf("write %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("read %s: written and not found", name)
}

// PartitionerName is the object name of the record of job's partitioner:
// the hash that puts a key in its task, in the input's partitions and in
// every internal topic. A key's state is in the task its partitioner chose
// when the state was written, so a job keeps one for good.
func PartitionerName(job string) string { return job + "/partitioner.json" }

type partitionerRecord struct {
	Partitioner string `json:"partitioner"`
}

// WritePartitioner records name as job's partitioner. One already
// recorded wraps ErrExists.
func WritePartitioner(ctx context.Context, st Storage, job, name string) error {
	if !validJobName(job) || name == "" {
		return fmt.Errorf("write %s: job %q, partitioner %q", PartitionerName(job), job, name)
	}
	b, err := json.Marshal(partitionerRecord{Partitioner: name})
	if err != nil {
		return fmt.Errorf("write %s: %w", PartitionerName(job), err)
	}
	if err := st.PutIfAbsent(ctx, PartitionerName(job), append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", PartitionerName(job), err)
	}
	return nil
}

// ReadPartitioner reads job's partitioner record; none wraps ErrNotFound.
func ReadPartitioner(ctx context.Context, st Storage, job string) (string, error) {
	name := PartitionerName(job)
	b, err := readRecord(ctx, st, name)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	var r partitionerRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Partitioner == "" {
		return "", fmt.Errorf("read %s: %w: %v", name, ErrCorrupt, err)
	}
	return r.Partitioner, nil
}

// AddedTopicName is the object name of the record of topic, an internal
// topic of job that its layout record does not list: read since a stage
// was added to the job. Like the layout record, it is written once and
// never rewritten.
func AddedTopicName(job, topic string) string { return job + "/layout-added/" + topic + ".json" }

// WriteAddedTopic records t as a topic of job's layout that its layout
// record does not list. One already recorded wraps ErrExists.
func WriteAddedTopic(ctx context.Context, st Storage, job string, t TopicLayout) error {
	name := AddedTopicName(job, t.Name)
	if !validJobName(job) || t.Name == "" || strings.ContainsAny(t.Name, "/") {
		return fmt.Errorf("write %s: job %q, topic %q", name, job, t.Name)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := st.PutIfAbsent(ctx, name, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// ReadAddedTopic reads the record WriteAddedTopic wrote of topic; none
// wraps ErrNotFound.
func ReadAddedTopic(ctx context.Context, st Storage, job, topic string) (TopicLayout, error) {
	name := AddedTopicName(job, topic)
	b, err := readRecord(ctx, st, name)
	if err != nil {
		return TopicLayout{}, fmt.Errorf("read %s: %w", name, err)
	}
	var t TopicLayout
	if err := json.Unmarshal(b, &t); err != nil || t.Name != topic || t.Partitions <= 0 {
		return TopicLayout{}, fmt.Errorf("read %s: %w: %v", name, ErrCorrupt, err)
	}
	return t, nil
}

// readRecord reads name, a small record of the layout's (at most
// maxLayoutSize bytes); a larger one wraps ErrCorrupt.
func readRecord(ctx context.Context, st Storage, name string) ([]byte, error) {
	rc, err := st.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxLayoutSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxLayoutSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrCorrupt, maxLayoutSize)
	}
	return b, nil
}

func validJobName(job string) bool {
	return job != "" && !strings.ContainsAny(job, "/") && job != "." && job != ".."
}

// HasCheckpoints reports whether any task of job completed a checkpoint
// that storage still holds: whether the job has a history to continue.
func HasCheckpoints(ctx context.Context, st Storage, job string) (bool, error) {
	names, err := st.List(ctx, job+"/tasks/")
	if err != nil {
		return false, fmt.Errorf("list checkpoints of %s: %w", job, err)
	}
	for _, name := range names {
		rest := strings.TrimPrefix(name, job+"/tasks/")
		task, _, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(task)
		if err != nil || n < 0 {
			continue
		}
		if _, rest, ok := parseCheckpointObject(job, n, name); ok && rest == manifestFile {
			return true, nil
		}
	}
	return false, nil
}

// ChangeKind says how a topic's layout changed.
type ChangeKind string

// Ways a topic's layout can change.
const (
	// ChangePartitions: the topic has another partition count.
	ChangePartitions ChangeKind = "partitions_changed"
	// ChangeRecreated: the topic was deleted and created again under its
	// name (another id).
	ChangeRecreated ChangeKind = "topic_recreated"
	// ChangeDeleted: the topic does not exist.
	ChangeDeleted ChangeKind = "topic_deleted"
)

// LayoutChange is how one topic differs from its recorded layout.
type LayoutChange struct {
	Was, Now TopicLayout
}

// CompareTopic returns how now differs from was (the same topic's
// recorded layout), false if it does not. Ids are compared where both are
// known.
func CompareTopic(was, now TopicLayout) (LayoutChange, bool) {
	c := LayoutChange{Was: was, Now: now}
	changed := now.Partitions == 0 ||
		was.ID != "" && now.ID != "" && was.ID != now.ID ||
		was.Partitions != now.Partitions
	return c, changed
}

// Kind is the change's kind; a recreated topic is ChangeRecreated whatever
// its partition count.
func (c LayoutChange) Kind() ChangeKind {
	switch {
	case c.Now.Partitions == 0:
		return ChangeDeleted
	case c.Was.ID != "" && c.Now.ID != "" && c.Was.ID != c.Now.ID:
		return ChangeRecreated
	}
	return ChangePartitions
}

func (c LayoutChange) String() string {
	t := c.Was.Name
	switch c.Kind() {
	case ChangeDeleted:
		s := fmt.Sprintf("topic %s does not exist (it had %d partitions", t, c.Was.Partitions)
		if c.Was.ID != "" {
			s += ", topic id " + c.Was.ID
		}
		return s + ")"
	case ChangeRecreated:
		s := fmt.Sprintf("topic %s was deleted and recreated: topic id %s, was %s", t, c.Now.ID, c.Was.ID)
		if c.Now.Partitions != c.Was.Partitions {
			s += fmt.Sprintf("; %d partitions, was %d", c.Now.Partitions, c.Was.Partitions)
		}
		return s
	}
	what := "partitions were added"
	if c.Now.Partitions < c.Was.Partitions {
		what = "fewer partitions"
	}
	return fmt.Sprintf("topic %s has %d partitions, was %d (%s)", t, c.Now.Partitions, c.Was.Partitions, what)
}

// LayoutError is a changed layout: it wraps ErrLayoutChanged and lists
// every topic that changed.
type LayoutError struct {
	// Against names what the live layout was compared with (a job's
	// layout record, the checkpoint of a task).
	Against string
	Changes []LayoutChange
	// Advice says what to do; the caller knows the tools for it.
	Advice string
}

func (e *LayoutError) Error() string {
	var b strings.Builder
	b.WriteString(ErrLayoutChanged.Error())
	if e.Against != "" {
		b.WriteString(" (" + e.Against + ")")
	}
	b.WriteString(": ")
	for i, c := range e.Changes {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.String())
	}
	if e.Advice != "" {
		b.WriteString(". " + e.Advice)
	}
	return b.String()
}

func (e *LayoutError) Unwrap() error { return ErrLayoutChanged }

// Kind is the kind of the error's first change, the one to report where
// only one fits (a metric's label).
func (e *LayoutError) Kind() ChangeKind {
	if len(e.Changes) == 0 {
		return ChangePartitions
	}
	return e.Changes[0].Kind()
}

// Compare compares live, the layout of the job's topics now, with l. A
// topic only one of them has is not compared (a job that no longer reads a
// topic; a topic the caller checks on its own). It returns nil or a
// *LayoutError with every change, in the order of live, against "the job's
// layout record" and without advice.
func (l Layout) Compare(live []TopicLayout) error {
	var changes []LayoutChange
	for _, now := range live {
		was, ok := l.Topic(now.Name)
		if !ok {
			continue
		}
		if c, changed := CompareTopic(was, now); changed {
			changes = append(changes, c)
		}
	}
	if len(changes) == 0 {
		return nil
	}
	return &LayoutError{Against: "the job's layout record " + LayoutName(l.Job), Changes: changes}
}
