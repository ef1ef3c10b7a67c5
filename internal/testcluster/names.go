package testcluster

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// UniqueName returns "<prefix>-<test name>-<random hex>" (without the prefix
// part when prefix is empty), lower case, made of [a-z0-9.-] only and at most
// 63 characters long, so it is a valid Kafka topic, transactional id, group
// id, S3 key segment and S3 bucket name. The test name makes leftovers on a
// shared broker traceable; the random part keeps reruns (-count=N) and
// parallel tests apart.
func UniqueName(t testing.TB, prefix string) string {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("unique name: %v", err)
	}
	name := sanitize(t.Name())
	if prefix = sanitize(prefix); prefix != "" {
		name = prefix + "-" + name
	}
	const max = 63 - 1 - 2*len(rnd)
	if len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return name + "-" + hex.EncodeToString(rnd[:])
}

func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.'
		if ok {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-.")
}
