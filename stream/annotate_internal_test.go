package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// failingWriter fails every call with err.
type failingWriter struct{ err error }

func (w failingWriter) Write(context.Context, int) error { return w.err }
func (w failingWriter) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, w.err
}
func (w failingWriter) Commit(context.Context, checkpoint.ID) error { return w.err }
func (w failingWriter) Close() error                                { return nil }

// TestAnnotatedWriterAnnotatesEveryError: a record the broker refused
// surfaces at whichever call comes next, Commit included (the commit of a
// checkpoint while the next one's records are in flight), and must name
// the settings it runs into there too (CI saw a MESSAGE_TOO_LARGE at a
// commit without them).
func TestAnnotatedWriterAnnotatesEveryError(t *testing.T) {
	cause := errors.New("MESSAGE_TOO_LARGE")
	hint := errors.New("hint")
	var sw engine.SinkWriter[int] = failingWriter{err: cause}
	w := annotatedWriter[int]{SinkWriter: sw, annotate: func(err error) error { return errors.Join(hint, err) }}
	ctx := context.Background()
	_, perr := w.PreCommit(ctx, 1)
	for name, err := range map[string]error{"Write": w.Write(ctx, 1), "PreCommit": perr, "Commit": w.Commit(ctx, 1)} {
		if !errors.Is(err, hint) || !errors.Is(err, cause) {
			t.Errorf("%s: %v, want the cause annotated", name, err)
		}
	}
}
