package state

import "reflect"

// KeyScope holds the key of the record being processed. The runtime sets it
// before it calls user code for a record (or fires a timer); the handles of a
// keyed operator read and write the state of that key. One scope belongs to one
// operator and is used from its goroutine only.
type KeyScope struct {
	key []byte
	// declared is what each state declared through the scope holds: its
	// kind and codecs (see Declared).
	declared map[string]string
}

// Declared returns each state declared through s by name, with what its
// bytes mean: its kind and the names of its codecs (CodecName), such as
// "value int64". A runtime records it with a checkpoint and
// refuses to restore a state into a declaration that reads its bytes as
// another thing.
func (s *KeyScope) Declared() map[string]string { return s.declared }

func (s *KeyScope) declare(name, what string) {
	if s.declared == nil {
		s.declared = map[string]string{}
	}
	s.declared[name] = what
}

// CodecName names what c's bytes are: the name c gives itself, with a
// method CodecName() string, or else its Go type, such as
// "nexmark.idCodec". This package's codecs name themselves ("int64",
// "json", ...). Checkpoints record these names: two codecs of one name
// must read each other's bytes, and a codec whose type is renamed or
// moved, its bytes kept, keeps its old name with the method.
func CodecName(c any) string {
	if n, ok := c.(interface{ CodecName() string }); ok {
		return n.CodecName()
	}
	return reflect.TypeOf(c).String()
}

// Set makes key the current key. It does not copy: the caller owns key and
// must leave it unchanged until it sets another key. nil means no key.
func (s *KeyScope) Set(key []byte) { s.key = key }

// Key returns the current key, nil if none is set.
func (s *KeyScope) Key() []byte { return s.key }
