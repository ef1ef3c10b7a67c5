package wordcount_test

import (
	"slices"
	"testing"

	"github.com/weirstream/weir/examples/wordcount"
)

func TestWords(t *testing.T) {
	for line, want := range map[string][]string{
		"The cat, the hat.": {"the", "cat", "the", "hat"},
		"  w1 w22\tW3\n":    {"w1", "w22", "w3"},
		"":                  nil,
		"naïve café":        {"naïve", "café"},
	} {
		if got := wordcount.Words(line); !slices.Equal(got, want) {
			t.Errorf("Words(%q) = %q, want %q", line, got, want)
		}
	}
	r, err := wordcount.Encode(wordcount.Out{Word: "cat", Count: 2})
	if err != nil || string(r.Key) != "cat" || string(r.Value) != `{"word":"cat","count":2}` {
		t.Errorf("Encode: %s %s %v", r.Key, r.Value, err)
	}
}
