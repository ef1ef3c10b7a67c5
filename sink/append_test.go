package sink

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
)

func appendKV(key, value []byte, s string) ([]byte, []byte, error) {
	return append(key, s...), append(value, s+"-value"...), nil
}

// TestAppendEncoderNulls: nil is a null key or value, an appended slice
// (even empty) is written as it is, before and after records are reused.
func TestAppendEncoderNulls(t *testing.T) {
	enc := AppendEncoder(func(key, value []byte, s string) ([]byte, []byte, error) {
		switch s {
		case "null":
			return nil, nil, nil
		case "empty":
			return key, value, nil
		}
		return appendKV(key, value, s)
	})
	for round := range 3 {
		for _, s := range []string{"x", "null", "empty"} {
			r, err := enc(s)
			if err != nil {
				t.Fatal(err)
			}
			switch s {
			case "null":
				if r.Key != nil || r.Value != nil {
					t.Errorf("round %d: null: key %q value %q, want nil, nil", round, r.Key, r.Value)
				}
			case "empty":
				if r.Key == nil || r.Value == nil || len(r.Key)+len(r.Value) != 0 {
					t.Errorf("round %d: empty: key %#v value %#v, want empty, not nil", round, r.Key, r.Value)
				}
			default:
				if string(r.Key) != "x" || string(r.Value) != "x-value" {
					t.Errorf("round %d: key %q value %q", round, r.Key, r.Value)
				}
			}
			recycle(r)
		}
	}
}

// TestAppendEncoderNeverAppendsToItsOwnSlices: an enc that returns bytes
// of its own (not the buffers it was given) never gets them back as a
// buffer, so a reused record never writes into them.
func TestAppendEncoderNeverAppendsToItsOwnSlices(t *testing.T) {
	static := []byte("static-key-with-room")[:6] // "static", with spare capacity
	big := make([]byte, 0, 1024)
	big = append(big, "a big value"...)
	enc := AppendEncoder(func(key, value []byte, n int) ([]byte, []byte, error) {
		if cap(key) > 0 && &key[:1][0] == &static[:1][0] {
			t.Fatal("given the encoder's own key as a buffer")
		}
		if cap(value) > 0 && &value[:1][0] == &big[:1][0] {
			t.Fatal("given the encoder's own value as a buffer")
		}
		if n%2 == 0 {
			return static, big, nil
		}
		return append(key, "overwrite"...), append(value, "overwrite"...), nil
	})
	for n := range 200 {
		r, err := enc(n)
		if err != nil {
			t.Fatal(err)
		}
		recycle(r)
	}
	if string(static[:cap(static)]) != "static-key-with-room" || string(big) != "a big value" {
		t.Fatalf("the encoder's own bytes were written: %q, %q", static[:cap(static)], big)
	}
}

// TestAppendEncoderAllocatesNothing: with the record back from its
// promise, the next encode allocates nothing (sync.Pool drops entries at
// random under the race detector: checked without it).
func TestAppendEncoderAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops entries at random under the race detector")
	}
	enc := AppendEncoder(func(key, value []byte, n int64) ([]byte, []byte, error) {
		return strconv.AppendInt(key, n, 10), strconv.AppendInt(value, n*n, 10), nil
	})
	var n int64
	allocs := testing.AllocsPerRun(1000, func() {
		n++
		r, err := enc(n)
		if err != nil || string(r.Key) != strconv.FormatInt(n, 10) {
			t.Fatalf("encode %d: %q, %v", n, r.Key, err)
		}
		recycle(r)
	})
	if allocs > 0.1 {
		t.Fatalf("%.2f allocations an encode, want 0", allocs)
	}
	// An encoder's own record is left alone.
	own := &kgo.Record{Value: []byte("mine")}
	recycle(own)
	if string(own.Value) != "mine" {
		t.Fatalf("recycle reset a record AppendEncoder did not make: %+v", own)
	}
}

// TestAppendEncoderRecordsWrittenIntact writes thousands of records through
// an exactly-once and an at-least-once writer whose records are reused as
// soon as their promises run, and reads every one back unchanged: a record
// is never reused while franz-go may still send it.
func TestAppendEncoderRecordsWrittenIntact(t *testing.T) {
	const n = 5000
	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce} {
		t.Run(string(d), func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config()
			cfg.Encode = AppendEncoder(func(key, value []byte, s string) ([]byte, []byte, error) {
				return nil, append(value, s...), nil
			})
			w := e.openDelivery(cfg, d)
			var want []string
			for id := checkpoint.ID(1); id <= 4; id++ {
				for i := range n / 4 {
					// Values of different lengths, so that a reused
					// buffer written too early shows.
					v := fmt.Sprintf("%d-%d-%s", id, i, "xxxxxxxxxxxxxxxx"[:i%17])
					want = append(want, v)
					if err := w.Write(ctx(t), v); err != nil {
						t.Fatal(err)
					}
				}
				preCommit(t, w, id)
				commit(t, w, id)
			}
			e.wantCommitted(want...)
		})
	}
}

// BenchmarkAppendEncoderInFlight encodes count-job-like records (a key, a
// JSON value of about 30 bytes) while inflight records are held as a
// producer holds them: each is read once when sent, half the window later,
// and recycled, as its promise does, when it leaves the window. The pool
// hands out records whose lines have left the caches since their last use,
// which is what an encode pays for in a worker.
//
//	go test ./sink -run '^$' -bench AppendEncoderInFlight -count 6
func BenchmarkAppendEncoderInFlight(b *testing.B) {
	enc := AppendEncoder(func(key, value []byte, n int64) ([]byte, []byte, error) {
		key = strconv.AppendInt(append(key, 'k'), n%10000, 10)
		value = append(value, `{"key":"k`...)
		value = strconv.AppendInt(value, n%10000, 10)
		value = append(value, `","count":`...)
		value = strconv.AppendInt(value, n/10000, 10)
		value = append(value, `,"sum":`...)
		value = strconv.AppendInt(value, n*7, 10)
		return key, append(value, '}'), nil
	})
	for _, inflight := range []int{1000, 10000, 40000} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			ring := make([]*kgo.Record, inflight)
			var sent int
			for i := range b.N {
				j := i % inflight
				if r := ring[j]; r != nil {
					recycle(r)
				}
				r, err := enc(int64(i))
				if err != nil {
					b.Fatal(err)
				}
				ring[j] = r
				if s := ring[(j+inflight/2)%inflight]; s != nil {
					sent += len(s.Key) + int(s.Value[len(s.Value)-2])
				}
			}
			benchSent = sent
		})
	}
}

// benchSent keeps BenchmarkAppendEncoderInFlight's reads from being
// optimised away.
var benchSent int
