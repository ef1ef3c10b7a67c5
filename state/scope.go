package state

// KeyScope holds the key of the record being processed. The runtime sets it
// before it calls user code for a record (or fires a timer); the handles of a
// keyed operator read and write the state of that key. One scope belongs to one
// operator and is used from its goroutine only.
type KeyScope struct {
	key []byte
}

// Set makes key the current key. It does not copy: the caller owns key and
// must leave it unchanged until it sets another key. nil means no key.
func (s *KeyScope) Set(key []byte) { s.key = key }

// Key returns the current key, nil if none is set.
func (s *KeyScope) Key() []byte { return s.key }
