package nexmark

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// A hand-written JSON codec for events, several times faster than
// encoding/json's reflection (the codec bounds what a worker job does per
// event). It writes exactly what encoding/json writes, and reads the
// objects it writes; anything else it reads (another field order, unknown
// fields, nulls, floats, non-ASCII text) falls back to encoding/json. It
// is no validator: a value of its shape that encoding/json would refuse
// for a detail (a number with leading zeros) it may take.

// appendEvent appends e's JSON value, as json.Marshal(e) writes it.
func appendEvent(b []byte, e Event) ([]byte, error) {
	switch e.Kind() {
	case KindPerson:
		p := e.Person
		b = append(b, `{"type":"person","person":{"id":`...)
		b = strconv.AppendInt(b, p.ID, 10)
		b = appendField(b, "name", p.Name)
		b = appendField(b, "emailAddress", p.EmailAddress)
		b = appendField(b, "creditCard", p.CreditCard)
		b = appendField(b, "city", p.City)
		b = appendField(b, "state", p.State)
		b = appendTimeField(b, "dateTime", p.DateTime)
		b = appendField(b, "extra", p.Extra)
	case KindAuction:
		a := e.Auction
		b = append(b, `{"type":"auction","auction":{"id":`...)
		b = strconv.AppendInt(b, a.ID, 10)
		b = appendField(b, "itemName", a.ItemName)
		b = appendField(b, "description", a.Description)
		b = appendIntField(b, "initialBid", a.InitialBid)
		b = appendIntField(b, "reserve", a.Reserve)
		b = appendTimeField(b, "dateTime", a.DateTime)
		b = appendTimeField(b, "expires", a.Expires)
		b = appendIntField(b, "seller", a.Seller)
		b = appendIntField(b, "category", a.Category)
		b = appendField(b, "extra", a.Extra)
	case KindBid:
		return append(appendBidJSON(append(b, `{"type":"bid","bid":`...), *e.Bid), '}'), nil
	default:
		return nil, errors.New("nexmark: event has not exactly one of person, auction and bid")
	}
	return append(b, "}}"...), nil
}

// appendBidJSON appends x as json.Marshal(x) writes it.
func appendBidJSON(b []byte, x Bid) []byte {
	b = append(b, `{"auction":`...)
	b = strconv.AppendInt(b, x.Auction, 10)
	b = appendIntField(b, "bidder", x.Bidder)
	b = appendIntField(b, "price", x.Price)
	b = appendField(b, "channel", x.Channel)
	b = appendField(b, "url", x.URL)
	b = appendTimeField(b, "dateTime", x.DateTime)
	b = appendField(b, "extra", x.Extra)
	return append(b, '}')
}

func appendKey(b []byte, k string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendIntField(b []byte, k string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, k), v, 10)
}

func appendField(b []byte, k, v string) []byte { return appendJSONString(appendKey(b, k), v) }

// appendTimeField appends t as RFC 3339, as time.Time's MarshalJSON does
// for the years it takes (0 to 9999; the generator's times are in them).
func appendTimeField(b []byte, k string, t time.Time) []byte {
	b = append(appendKey(b, k), '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does: HTML characters and
// controls escaped; anything not ASCII through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	mark := len(b)
	b = append(b, '"')
	start := 0
	for i := plainEncode(s, 0); i < len(s); i = plainEncode(s, i+1) {
		c := s[i]
		if c >= utf8.RuneSelf {
			v, _ := json.Marshal(s) // a string always marshals
			return append(b[:mark], v...)
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b': // encoding/json escapes these two short since Go 1.22
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// errSlow sends a value the fast reader does not take to encoding/json.
var errSlow = errors.New("not the fast codec's shape")

// parseEvent reads a value appendEvent wrote, or returns errSlow. The
// value is copied into one string, and the event's strings without
// escapes are slices of it: one allocation for all of them.
func parseEvent(b []byte) (Event, error) {
	s := scanner{b: string(b)}
	s.expect('{')
	if s.key() != "type" {
		return Event{}, errSlow
	}
	typ := s.str()
	s.expect(',')
	kind := s.key()
	if s.err != nil || kind != typ {
		return Event{}, errSlow
	}
	var e Event
	s.expect('{')
	switch kind {
	case "person":
		p := &Person{}
		p.ID = s.intField("id", true)
		p.Name = s.strField("name")
		p.EmailAddress = s.strField("emailAddress")
		p.CreditCard = s.strField("creditCard")
		p.City = s.strField("city")
		p.State = s.strField("state")
		p.DateTime = s.timeField("dateTime")
		p.Extra = s.strField("extra")
		e.Person = p
	case "auction":
		a := &Auction{}
		a.ID = s.intField("id", true)
		a.ItemName = s.strField("itemName")
		a.Description = s.strField("description")
		a.InitialBid = s.intField("initialBid", false)
		a.Reserve = s.intField("reserve", false)
		a.DateTime = s.timeField("dateTime")
		a.Expires = s.timeField("expires")
		a.Seller = s.intField("seller", false)
		a.Category = s.intField("category", false)
		a.Extra = s.strField("extra")
		e.Auction = a
	case "bid":
		x := &Bid{}
		x.Auction = s.intField("auction", true)
		x.Bidder = s.intField("bidder", false)
		x.Price = s.intField("price", false)
		x.Channel = s.strField("channel")
		x.URL = s.strField("url")
		x.DateTime = s.timeField("dateTime")
		x.Extra = s.strField("extra")
		e.Bid = x
	default:
		return Event{}, errSlow
	}
	s.expect('}')
	s.expect('}')
	s.space()
	if s.err != nil || s.i != len(s.b) {
		return Event{}, errSlow
	}
	return e, nil
}

// scanner reads JSON tokens of the shape appendEvent writes (whitespace
// allowed between them); any surprise sets err to errSlow.
type scanner struct {
	b   string
	i   int
	err error
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) expect(c byte) {
	s.space()
	if s.err != nil || s.i >= len(s.b) || s.b[s.i] != c {
		s.err = errSlow
		return
	}
	s.i++
}

// key reads `"name":` and returns name.
func (s *scanner) key() string {
	k := s.str()
	s.expect(':')
	return k
}

// field reads `,"name":`, or `"name":` first in an object, checking name.
func (s *scanner) field(name string, first bool) {
	if !first {
		s.expect(',')
	}
	if s.key() != name {
		s.err = errSlow
	}
}

func (s *scanner) intField(name string, first bool) int64 {
	s.field(name, first)
	s.space()
	if s.err != nil {
		return 0
	}
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	v, err := strconv.ParseInt(s.b[start:s.i], 10, 64)
	if err != nil || s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.err = errSlow // a float, or out of range: encoding/json says which
	}
	return v
}

func (s *scanner) strField(name string) string {
	s.field(name, false)
	return s.str()
}

func (s *scanner) timeField(name string) time.Time {
	s.field(name, false)
	v := s.str()
	if s.err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		s.err = errSlow
	}
	return t
}

// str reads a JSON string.
func (s *scanner) str() string {
	s.expect('"')
	if s.err != nil {
		return ""
	}
	start := s.i
	if s.i = plainDecode(s.b, s.i); s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			v := s.b[start:s.i]
			s.i++
			return v
		case '\\':
			return s.escaped(start)
		}
	}
	s.err = errSlow // a control (invalid), or not ASCII: encoding/json judges UTF-8
	return ""
}

// escaped reads the rest of a string that has escapes, from start: runs
// of plain bytes are copied at once, into a builder sized for the rest of
// the value, so that the string is allocated once.
func (s *scanner) escaped(start int) string {
	var out strings.Builder
	out.Grow(len(s.b) - start)
	out.WriteString(s.b[start:s.i])
	for s.i < len(s.b) {
		j := plainDecode(s.b, s.i)
		out.WriteString(s.b[s.i:j])
		s.i = j
		if j == len(s.b) {
			break
		}
		switch s.b[j] {
		case '"':
			s.i++
			return out.String()
		case '\\':
		default:
			s.err = errSlow // controls are invalid; let encoding/json judge UTF-8
			return ""
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return ""
			}
			if utf16.IsSurrogate(r) {
				// The other half must follow, else encoding/json's rules
				// (a replacement character) apply.
				r2 := rune(-1)
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					if r2, ok = s.hex4(); !ok {
						return ""
					}
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					s.err = errSlow
					return ""
				}
			}
			out.WriteRune(r)
		default:
			s.err = errSlow
			return ""
		}
	}
	s.err = errSlow
	return ""
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		s.err = errSlow
		return 0, false
	}
	v, err := strconv.ParseUint(s.b[s.i:s.i+4], 16, 32)
	if err != nil {
		s.err = errSlow
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// Word-at-a-time scanning for the bytes JSON strings treat specially, 8
// bytes per step (the classic "has zero byte" bit trick): most of an
// event's bytes are plain text.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasLess has the high bit set in each byte of w that is below n (n <=
// 0x80; bits above the first such byte may be set too).
func hasLess(w uint64, n byte) uint64 { return (w - ones*uint64(n)) & ^w & highs }

// hasByte has the high bit set in the first byte of w that equals c, at
// least.
func hasByte(w uint64, c byte) uint64 { return hasLess(w^(ones*uint64(c)), 1) }

// word is the 8 bytes of s at i, little-endian.
func word(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// plainDecode returns the index of the first byte at or after i that a
// JSON string reader must look at: a quote, a backslash, a control or a
// byte of a multi-byte character; len(s) if none.
func plainDecode(s string, i int) int {
	for ; i+8 <= len(s); i += 8 {
		w := word(s, i)
		if hasByte(w, '"')|hasByte(w, '\\')|hasLess(w, 0x20)|w&highs != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}

// plainEncode returns the index of the first byte at or after i that
// appendJSONString must escape or hand to encoding/json; len(s) if none.
func plainEncode(s string, i int) int {
	for ; i+8 <= len(s); i += 8 {
		w := word(s, i)
		if hasByte(w, '"')|hasByte(w, '\\')|hasByte(w, '<')|hasByte(w, '>')|hasByte(w, '&')|hasLess(w, 0x20)|w&highs != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}
