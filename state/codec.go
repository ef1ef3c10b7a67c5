package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// CheckedCodec is a Codec whose encoding can fail (JSON). Handles use
// AppendChecked when a codec has it and return its error.
type CheckedCodec[T any] interface {
	Codec[T]
	AppendChecked(dst []byte, v T) ([]byte, error)
}

// Codec turns values of T into bytes and back. Append appends the encoding of
// v to dst and returns the extended slice, so that a handle can encode into a
// reused buffer without allocating. Decode must not keep b: it is owned by the
// backend and valid only until the next call into it.
//
// The byte order of encodings matters where a backend iterates: Map.Range
// visits user keys in the byte order of their encodings and timers fire in the
// byte order of their 8-byte big-endian timestamps. The fixed-width numeric
// codecs here preserve the numeric order; String and Bytes preserve
// lexicographic byte order; JSON preserves no useful order.
type Codec[T any] interface {
	Append(dst []byte, v T) []byte
	Decode(b []byte) (T, error)
}

// Int64 encodes an int64 as 8 bytes, big-endian with the sign bit flipped, so
// that byte order is numeric order (negative numbers first).
func Int64() Codec[int64] { return int64Codec{} }

// Uint64 encodes a uint64 as 8 bytes, big-endian.
func Uint64() Codec[uint64] { return uint64Codec{} }

// Float64 encodes a float64 as 8 bytes in an order-preserving form: the IEEE
// bits with the sign bit flipped for positive numbers and all bits flipped for
// negative ones. NaNs round-trip bit for bit.
func Float64() Codec[float64] { return float64Codec{} }

// String encodes a string as its bytes.
func String() Codec[string] { return stringCodec{} }

// Bytes encodes a byte slice as itself; Decode returns a copy.
func Bytes() Codec[[]byte] { return bytesCodec{} }

// JSON encodes T with encoding/json. It is the one reflection-based codec:
// convenient for structured values, slower than a hand-written codec, and it
// allocates on every call.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

// DecodeError is returned by the codecs of this package for bytes that are not
// an encoding of their type.
type DecodeError struct {
	Codec string // "int64", "json", ...
	Len   int    // length of the input
	Err   error  // the underlying error, if any
}

func (e *DecodeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("state: decode %s from %d bytes: %v", e.Codec, e.Len, e.Err)
	}
	return fmt.Sprintf("state: decode %s: want 8 bytes, got %d", e.Codec, e.Len)
}

func (e *DecodeError) Unwrap() error { return e.Err }

type int64Codec struct{}

// CodecName is the codec's name in checkpoints (see CodecName).
func (int64Codec) CodecName() string { return "int64" }

func (int64Codec) Append(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func (int64Codec) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, &DecodeError{Codec: "int64", Len: len(b)}
	}
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)), nil
}

type uint64Codec struct{}

// CodecName is the codec's name in checkpoints (see CodecName).
func (uint64Codec) CodecName() string { return "uint64" }

func (uint64Codec) Append(dst []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, v)
}

func (uint64Codec) Decode(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, &DecodeError{Codec: "uint64", Len: len(b)}
	}
	return binary.BigEndian.Uint64(b), nil
}

type float64Codec struct{}

// CodecName is the codec's name in checkpoints (see CodecName).
func (float64Codec) CodecName() string { return "float64" }

func (float64Codec) Append(dst []byte, v float64) []byte {
	u := math.Float64bits(v)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u)
}

func (float64Codec) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, &DecodeError{Codec: "float64", Len: len(b)}
	}
	u := binary.BigEndian.Uint64(b)
	if u&(1<<63) != 0 {
		u &^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), nil
}

type stringCodec struct{}

// CodecName is the codec's name in checkpoints (see CodecName).
func (stringCodec) CodecName() string { return "string" }

func (stringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (stringCodec) Decode(b []byte) (string, error)    { return string(b), nil }

type bytesCodec struct{}

// CodecName is the codec's name in checkpoints (see CodecName).
func (bytesCodec) CodecName() string { return "bytes" }

func (bytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }

// Decode copies: b belongs to the backend.
func (bytesCodec) Decode(b []byte) ([]byte, error) { return append([]byte{}, b...), nil }

type jsonCodec[T any] struct{}

// CodecName is "json", whatever T: a type renamed or moved keeps its
// bytes, and a struct whose fields change is the user's to keep readable,
// as for any JSON.
func (jsonCodec[T]) CodecName() string { return "json" }

// Append writes "null" for a value encoding/json rejects (a channel, a NaN);
// handles do not use it but AppendChecked, which reports the error.
func (c jsonCodec[T]) Append(dst []byte, v T) []byte {
	out, err := c.AppendChecked(dst, v)
	if err != nil {
		return append(dst, "null"...)
	}
	return out
}

func (jsonCodec[T]) AppendChecked(dst []byte, v T) ([]byte, error) {
	enc, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("state: encode json %T: %w", v, err)
	}
	return append(dst, enc...), nil
}

func (jsonCodec[T]) Decode(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, &DecodeError{Codec: fmt.Sprintf("json %T", v), Len: len(b), Err: err}
	}
	return v, nil
}
