package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/marker"
)

// marks writes a task's watermark into every partition of the sink's
// topic (Config.Watermarks), at pre-commit, when it moved since the
// last it wrote. A sink restored after a failure writes its first again:
// the markers it wrote after the checkpoint were aborted with their
// transaction.
type marks struct {
	on      bool
	brokers []string
	opts    []kgo.Opt
	topic   string
	task    int
	cur     engine.Watermark
	have    bool // a watermark came
	written bool // cur was written
	parts   int  // the topic's partitions; 0 until looked up
}

func newMarks[T any](cfg Config[T], info engine.TaskInfo) marks {
	return marks{on: cfg.Watermarks, brokers: cfg.Brokers, opts: cfg.ClientOpts, topic: cfg.Topic, task: info.Task}
}

// take is the runtime's watermark.
func (m *marks) take(w engine.Watermark) {
	if !m.on || m.have && w == m.cur {
		return
	}
	m.cur, m.have, m.written = w, true, false
}

// write produces the markers, if due, with produce.
func (m *marks) write(ctx context.Context, produce func(context.Context, *kgo.Record) error) error {
	if !m.on || !m.have || m.written {
		return nil
	}
	if m.parts == 0 {
		n, err := m.partitions(ctx)
		if err != nil {
			return fmt.Errorf("watermark markers for %s: %w", m.topic, err)
		}
		if m.task >= n {
			return fmt.Errorf("watermark markers for %s: task %d, but the topic has %d partitions (one per task)", m.topic, m.task, n)
		}
		m.parts = n
	}
	mk := marker.Mark{Task: m.task, Tasks: m.parts, Millis: m.cur.Millis, Idle: m.cur.Idle}
	for p := range m.parts {
		if err := produce(ctx, marker.Record(m.topic, int32(p), mk)); err != nil {
			return err
		}
	}
	m.written = true
	return nil
}

// partitions asks the brokers how many partitions the topic has.
func (m *marks) partitions(ctx context.Context) (int, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(m.brokers...)}, m.opts...)...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, m.topic)
	if err != nil {
		return 0, err
	}
	td, ok := tds[m.topic]
	switch {
	case !ok:
		return 0, errors.New("the brokers do not know it")
	case td.Err != nil:
		return 0, td.Err
	case len(td.Partitions) == 0:
		return 0, errors.New("it has no partitions")
	}
	return len(td.Partitions), nil
}
