package sink

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestProducerQuota: a sink reads the producer quota Kafka applies to its
// client id, its own before the default client id's, and knows when there
// is none. The default is set only on the in-process broker: on a shared
// one it would throttle every other test's producers.
func TestProducerQuota(t *testing.T) {
	c := testcluster.Kafka(t)
	adm := c.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel) // after the removal below
	own, other := testcluster.UniqueName(t, "own"), testcluster.UniqueName(t, "other")
	set := func(name *string, rate float64, remove bool) {
		t.Helper()
		res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
			Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: name}},
			Ops:    []kadm.AlterClientQuotaOp{{Key: producerByteRate, Value: rate, Remove: remove}},
		}})
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			t.Fatalf("alter the quota of %v: %v", name, err)
		}
	}
	// A quota set reaches every broker's cache a moment later.
	eventually := func(id string, want float64, wantErr error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			q, err := producerQuota(ctx, adm, id)
			if q == want && errors.Is(err, wantErr) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("quota of %s: %v, %v; want %v, %v", id, q, err, want, wantErr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	set(&own, 300000, false)
	t.Cleanup(func() { set(&own, 0, true) })
	eventually(own, 300000, nil)
	if c.Fake == nil {
		return
	}
	eventually(other, 0, errNoQuota)
	set(nil, 150000, false)
	eventually(other, 150000, nil)
	eventually(own, 300000, nil)
}
