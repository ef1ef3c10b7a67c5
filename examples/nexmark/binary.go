package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Binary codecs of the records the queries keep in state or send through
// repartition topics: varints and length-prefixed strings, cheaper than
// JSON on the hot path.

func appendInt(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendTime(b []byte, t time.Time) []byte { return appendInt(b, t.UnixMilli()) }

// reader decodes what the append functions wrote; the first problem
// sticks, and end reports it.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	if r.err != nil {
		return ""
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err = errShort
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

func (r *reader) time() time.Time { return time.UnixMilli(r.int()).UTC() }

func (r *reader) end(what string) error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("nexmark: decode %s: %w", what, r.err)
	}
	return nil
}

func appendBid(b []byte, v Bid) []byte {
	b = appendInt(b, v.Auction)
	b = appendInt(b, v.Bidder)
	b = appendInt(b, v.Price)
	b = appendTime(b, v.DateTime)
	b = appendString(b, v.Channel)
	b = appendString(b, v.URL)
	return appendString(b, v.Extra)
}

func (r *reader) bid() Bid {
	return Bid{Auction: r.int(), Bidder: r.int(), Price: r.int(), DateTime: r.time(), Channel: r.string(), URL: r.string(), Extra: r.string()}
}
