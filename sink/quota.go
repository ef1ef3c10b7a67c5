package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// producerByteRate is Kafka's producer quota key.
const producerByteRate = "producer_byte_rate"

// errNoQuota says no client-id quota applies to the client.
var errNoQuota = errors.New("no producer quota for the client id")

// producerQuota returns the producer quota (bytes per second) Kafka applies
// to clientID by its client id alone: the client id's own quota, else the
// default client id's. A quota of the client's user (SASL) is not looked
// for: its first throttle paces the sink, as an unknown quota does.
func producerQuota(ctx context.Context, adm *kadm.Client, clientID string) (float64, error) {
	own, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{
		{Type: "client-id", MatchName: &clientID, MatchType: kmsg.QuotasMatchTypeExact},
	})
	if err != nil {
		return 0, fmt.Errorf("describe the quotas of client id %q: %w", clientID, err)
	}
	if q, ok := byteRate(own); ok {
		return q, nil
	}
	def, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{
		{Type: "client-id", MatchType: kmsg.QuotasMatchTypeDefault},
	})
	if err != nil {
		return 0, fmt.Errorf("describe the default client id's quotas: %w", err)
	}
	if q, ok := byteRate(def); ok {
		return q, nil
	}
	return 0, errNoQuota
}

// byteRate is the producer byte rate of the described entities that have
// a client id component only.
func byteRate(qs kadm.DescribedClientQuotas) (float64, bool) {
	for _, q := range qs {
		if len(q.Entity) != 1 || q.Entity[0].Type != "client-id" {
			continue
		}
		for _, v := range q.Values {
			if v.Key == producerByteRate && v.Value > 0 {
				return v.Value, true
			}
		}
	}
	return 0, false
}
