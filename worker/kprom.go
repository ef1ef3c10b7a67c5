package worker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kpromSet gathers the kgo client metrics (franz-go's kprom plugin) of the
// clients the worker opens and closes as tasks come and go. kprom registers
// a client's collectors when the client opens; each client gets a registry
// of its own, so that a task's restart never collides with the client it
// replaces, and the set gathers from the live ones at each scrape.
type kpromSet struct {
	mu   sync.Mutex
	live map[*kpromHook]struct{}
}

var _ prometheus.Gatherer = (*kpromSet)(nil)

func newKpromSet() *kpromSet { return &kpromSet{live: map[*kpromHook]struct{}{}} }

// hook returns the hooks for one new client, its metrics labelled with
// labels.
func (s *kpromSet) hook(labels prometheus.Labels) kgo.Hook {
	reg := prometheus.NewRegistry()
	h := &kpromHook{Metrics: kprom.NewMetrics("weir_kgo", kprom.Registry(reg), kprom.WithStaticLabel(labels)), reg: reg, set: s}
	s.mu.Lock()
	s.live[h] = struct{}{}
	s.mu.Unlock()
	return h
}

// Gather implements prometheus.Gatherer.
func (s *kpromSet) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	gs := make(prometheus.Gatherers, 0, len(s.live))
	for h := range s.live {
		gs = append(gs, h.reg)
	}
	s.mu.Unlock()
	return gs.Gather()
}

type kpromHook struct {
	*kprom.Metrics
	reg *prometheus.Registry
	set *kpromSet
}

// OnClientClosed drops the client's metrics with the client.
func (h *kpromHook) OnClientClosed(cl *kgo.Client) {
	h.Metrics.OnClientClosed(cl)
	h.set.mu.Lock()
	delete(h.set.live, h)
	h.set.mu.Unlock()
}
