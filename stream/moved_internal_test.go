package stream

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
)

// A KeyBy's records are keyed again after the move, from their decoded
// value. A value codec that does not give the key's field back would key
// a record by another key, within its own task: two users' state merged.
// The read side checks that the key computed again is the one the record
// was moved by.
func TestMovedDecoderChecksTheKey(t *testing.T) {
	type click struct {
		User string `json:"user"`
		N    int    `json:"n"`
	}
	user := func(c click) string { return c.User }
	move := func(c click) *kgo.Record {
		v, err := state.Encode(state.JSON[click](), nil, c)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Key: state.String().Append(nil, user(c)), Value: v}
	}
	decode := movedDecoder("by-user", user, state.String(), state.JSON[click]())
	for _, c := range []click{{"ana", 1}, {"bo", 2}, {"", 3}} {
		got, err := decode(move(c))
		if err != nil || got != c {
			t.Fatalf("decode %+v: %+v, %v", c, got, err)
		}
	}
	// Two users whose names are not UTF-8: JSON gives both back as
	// U+FFFD, one key.
	for _, name := range []string{"\xff", "\xfe"} {
		_, err := decode(move(click{User: name, N: 1}))
		if err == nil || !strings.Contains(err.Error(), `keyBy "by-user"`) || !strings.Contains(err.Error(), "codec does not give back") {
			t.Errorf("user %q: %v; want the record refused, naming the KeyBy", name, err)
		}
	}
}
