package nexmark_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/nexmark"
)

// The codec's cost per event, over the stream's mix (92% bids): the floor
// of every query's cost per event in a worker job.

func BenchmarkEncode(b *testing.B) {
	evs := generate(b, testConfig(), 5000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := nexmark.Encode(evs[i%len(evs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	var recs []*kgo.Record
	for _, e := range generate(b, testConfig(), 5000) {
		r, err := nexmark.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, r)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := nexmark.Decode(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	g, err := nexmark.NewGenerator(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		g.Event(i)
	}
}

func BenchmarkEncodeBid(b *testing.B) {
	var bids []nexmark.Bid
	for _, e := range generate(b, testConfig(), 5000) {
		if e.Bid != nil {
			bids = append(bids, *e.Bid)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := nexmark.EncodeBid(bids[i%len(bids)]); err != nil {
			b.Fatal(err)
		}
	}
}
