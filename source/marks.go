package source

import (
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/marker"
)

// upstream is the last marker of each task that writes into a split
// (Config.Watermarks).
type upstream struct {
	marks []checkpoint.UpstreamWatermark // index: the task; MinInt64 before its first
}

func restoreUpstream(ws []checkpoint.UpstreamWatermark) *upstream {
	return &upstream{marks: slices.Clone(ws)}
}

// take takes task m.Task's marker. Markers of a task never go back, but
// a task restored from an earlier checkpoint writes its first again.
func (u *upstream) take(m marker.Mark) error {
	if u.marks == nil {
		u.marks = make([]checkpoint.UpstreamWatermark, m.Tasks)
		for i := range u.marks {
			u.marks[i].Watermark = math.MinInt64
		}
	}
	if m.Tasks != len(u.marks) {
		return fmt.Errorf("watermark marker of task %d says %d tasks write into the topic, earlier ones %d: the job's task count changed", m.Task, m.Tasks, len(u.marks))
	}
	w := &u.marks[m.Task]
	w.Watermark, w.Idle = max(w.Watermark, m.Millis), m.Idle
	return nil
}

// watermark is the least watermark of the tasks not idle: nothing until
// each task wrote a marker, idle when all are.
func (u *upstream) watermark() engine.Watermark {
	if u == nil {
		return engine.Watermark{Millis: math.MinInt64}
	}
	low, active := int64(math.MaxInt64), false
	for _, w := range u.marks {
		if !w.Idle {
			low, active = min(low, w.Watermark), true
		}
	}
	if !active {
		// All idle: the last watermark of any, which the runtime keeps.
		low = math.MinInt64
		for _, w := range u.marks {
			low = max(low, w.Watermark)
		}
		return engine.Watermark{Millis: low, Idle: true}
	}
	return engine.Watermark{Millis: low}
}

func (u *upstream) positions() []checkpoint.UpstreamWatermark { return slices.Clone(u.marks) }

// mark takes a marker record.
func (r *reader[T]) mark(rec *kgo.Record) error {
	m, err := marker.Decode(rec.Value)
	if err != nil {
		return err
	}
	u := r.marks[rec.Topic]
	if u == nil {
		u = &upstream{}
		r.marks[rec.Topic] = u
	}
	return u.take(m)
}

// markedReader is the reader of a source whose splits carry their
// watermarks (Config.Watermarks).
type markedReader[T any] struct{ *reader[T] }

// SplitWatermark implements engine.WatermarkReader.
func (r markedReader[T]) SplitWatermark(topic string, _ int32) engine.Watermark {
	return r.marks[topic].watermark()
}
