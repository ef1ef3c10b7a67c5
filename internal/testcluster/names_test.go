package testcluster

import (
	"regexp"
	"testing"
)

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`)
	for _, tc := range []struct {
		name, prefix, want string // want: the part before the random suffix
	}{
		{name: "plain", prefix: "topic", want: "topic-testuniquename-plain-"},
		{name: "no prefix", want: "testuniquename-no-prefix-"},
		{name: "Odd/Chars__Here", prefix: "Tx ID", want: "tx-id-testuniquename-odd-chars-here-"},
		{name: "a very long subtest name that would not fit into a bucket name at all", prefix: "p",
			want: "p-testuniquename-a-very-long-subtest-name-that-would-n-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := UniqueName(t, tc.prefix), UniqueName(t, tc.prefix)
			if a == b {
				t.Fatalf("two calls gave the same name %q", a)
			}
			if len(a) > 63 || !valid.MatchString(a) {
				t.Fatalf("UniqueName = %q: not a valid topic/bucket name", a)
			}
			if got := a[:len(a)-8]; got != tc.want {
				t.Fatalf("UniqueName = %q, want %q + 8 hex digits", a, tc.want)
			}
		})
	}
}
