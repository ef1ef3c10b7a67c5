package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/worker/internal/membership"
	"github.com/weirstream/weir/worker/internal/status"
)

// member is the worker's place in the job's consumer group: franz-go
// runs the group protocol (joins, heartbeats, the cooperative two-round
// rebalance) and calls back here when tasks are assigned, revoked or lost.
type member struct {
	w   *worker
	cl  *kgo.Client
	bal *membership.Balancer

	assignedOnce atomic.Bool
	// draining: tasks assigned from now on are not started (the worker
	// leaves the group once its tasks drained).
	draining atomic.Bool

	mu   sync.Mutex
	mine []int // tasks the group assigns this worker
	// givenUp are assigned tasks that stopped because a newer owner claimed
	// them: left out of the join metadata so that the group assigns them
	// again, and started again if it assigns them here.
	givenUp map[int]bool
}

// runGroup joins the job's group and runs the tasks it assigns until ctx
// ends or the drain: then every task stops with a final checkpoint and the
// worker leaves the group.
func (w *worker) runGroup(ctx context.Context) error {
	c := &w.cfg
	m := &member{w: w, givenUp: map[int]bool{}}
	host, _ := os.Hostname()
	m.bal = &membership.Balancer{
		Topics:     w.inputs[:1], // the group hands out tasks: one topic carries them
		Partitions: w.layout.partitions,
		GivenUp:    m.isGivenUp,
		Meta: func() membership.Meta {
			return membership.Meta{Host: host, HTTP: advertised(w.metrics.httpAddr, host)}
		},
		NewEpoch: func(ctx context.Context) (int64, error) {
			return checkpoint.NextEpoch(ctx, w.storage, c.name())
		},
		Storage: w.storageID,
		Refused: w.fail,
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID("weir-worker"),
		kgo.ConsumerGroup(c.Group()),
		kgo.ConsumeTopics(w.inputs[0]),
		kgo.Balancers(m.bal),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(c.SessionTimeout),
		kgo.HeartbeatInterval(c.HeartbeatInterval),
		kgo.RebalanceTimeout(c.RebalanceTimeout),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(m.revoked),
		kgo.OnPartitionsLost(m.lost),
		kgo.WithHooks(w.kgoMetrics.hook(prometheus.Labels{"task": "", "client": "group"})),
		kgo.WithHooks(groupErrors{w}),
	}
	cl, err := kgo.NewClient(append(opts, w.kafka...)...)
	if err != nil {
		return fmt.Errorf("group %s: %w", c.Group(), err)
	}
	// The group only hands out tasks: the tasks read their partitions
	// themselves, from their checkpoints.
	cl.PauseFetchTopics(w.inputs[0])
	m.cl = cl
	// Under mu: the status server, started before the group, reads it.
	w.mu.Lock()
	w.group = m
	w.mu.Unlock()

	var drainErr error
	select {
	case <-ctx.Done():
		// Stopped at once: the tasks stop where they are (the runner's
		// context ends with ctx); leave the group without waiting.
		w.runner.Wait()
	case <-w.opts.Drain:
		m.draining.Store(true)
		w.log.Info("draining: final checkpoint of every task, then leave the group")
		drainErr = w.drainAll(c.HandoffTimeout)
	}
	// Leaving revokes what the group still assigns us; the tasks stopped
	// already, so that is quick.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := cl.LeaveGroupContext(closeCtx); err != nil {
		w.log.Warn("leave group", "err", err)
	}
	cl.Close()
	w.log.Info("left the group", "group", c.Group())
	return drainErr
}

// groupErrors hears the group client's management errors, which franz-go
// otherwise only hands to a poll, and the worker never polls the group's
// client (the tasks read their partitions themselves). Without it a group
// the broker will not let the worker join leaves the worker idle and
// silent. An error no retry mends fails the worker, naming what to
// change; others are logged, and the client retries.
type groupErrors struct{ w *worker }

func (h groupErrors) OnGroupManageError(err error) {
	c := &h.w.cfg
	switch {
	case errors.Is(err, kerr.InvalidSessionTimeout):
		h.w.fail(fmt.Errorf("--session-timeout %v: the broker refuses it (%w); it accepts group.min.session.timeout.ms (6s by default) to group.max.session.timeout.ms (30m by default)", c.SessionTimeout, err))
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		h.w.fail(fmt.Errorf("group %s: %w: the worker's principal needs READ on the group (--name names it)", c.Group(), err))
	default:
		h.w.log.Warn("group: joining or heartbeating failed; retrying", "group", c.Group(), "err", err)
	}
}

// membership returns the worker's place in the job's group: nil with
// static tasks, and until runGroup joined.
func (w *worker) membership() *member {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.group
}

// joined reports whether the group assigned this worker tasks (or none)
// at least once.
func (m *member) joined() bool { return m.assignedOnce.Load() }

// assignedTasks returns the tasks the group assigns this worker now.
func (m *member) assignedTasks() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mine)
}

func (m *member) tasksOf(ps map[string][]int32) []int {
	var ts []int
	for _, p := range ps[m.bal.Topics[0]] {
		ts = append(ts, int(p))
	}
	slices.Sort(ts)
	return ts
}

func (m *member) setMine(add, remove []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mine = slices.DeleteFunc(m.mine, func(t int) bool { return slices.Contains(remove, t) })
	for _, t := range add {
		if !slices.Contains(m.mine, t) {
			m.mine = append(m.mine, t)
		}
	}
	slices.Sort(m.mine)
	m.w.metrics.assigned.Set(float64(len(m.mine)))
}

// assigned starts the tasks a rebalance added, with the epoch the leader
// allocated for this generation. franz-go calls it after every rebalance,
// also when nothing was added.
func (m *member) assigned(ctx context.Context, cl *kgo.Client, added map[string][]int32) {
	ts := m.tasksOf(added)
	epoch := m.bal.CurrentEpoch()
	_, gen := cl.GroupMetadata()
	m.w.metrics.rebalances.Inc()
	m.setMine(ts, nil)
	back := m.takeBack(ts)
	m.assignedOnce.Store(true)
	m.w.log.Info("group assignment", "generation", gen, "epoch", epoch, "added", ts, "tasks", m.assignedTasks())
	if len(back) > 0 {
		m.w.log.Info("tasks given up here are assigned here again: starting them with this generation's epoch", "tasks", back, "epoch", epoch)
		ts = append(ts, back...)
	}
	if m.draining.Load() || m.w.stopErr() != nil {
		return
	}
	// A rebalance is when partitions added to a topic show (the group's
	// leader watches the topic's metadata): compare before a task starts.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	ok := m.w.checkLayout(ctx, "rebalance")
	cancel()
	if !ok {
		return
	}
	for _, t := range ts {
		m.w.log.Info("task assigned", "task", t, "epoch", epoch, "generation", gen)
		m.w.startTask(t, epoch)
	}
}

// giveUp hands task t back to the group: it stopped here because a newer
// owner claimed it (this worker was a zombie for it, or the epochs were
// set by hand), and the group still assigns it here. The next rebalance
// leaves it out of this worker's tasks and assigns it with a new epoch.
func (m *member) giveUp(t int) {
	m.mu.Lock()
	m.givenUp[t] = true
	m.mu.Unlock()
	m.cl.ForceRebalance()
}

// takeBack returns the given-up tasks this rebalance assigned here again,
// which are to start as if added, and forgets them as given up; so too
// the added ones. A given-up task still in this worker's tasks was either
// left out of the join, so that the leader found it unowned and gave it
// here (nobody else runs it), or given up after the join was sent: that
// one waits for the rebalance giveUp asked for.
func (m *member) takeBack(added []int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range added {
		delete(m.givenUp, t)
	}
	var back []int
	for t := range m.givenUp {
		if slices.Contains(m.mine, t) && m.bal.LeftOutOfJoin(t) {
			delete(m.givenUp, t)
			back = append(back, t)
		}
	}
	slices.Sort(back)
	return back
}

// forget drops ts from the given-up tasks: the group took them away.
func (m *member) forget(ts []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range ts {
		delete(m.givenUp, t)
	}
}

func (m *member) isGivenUp(t int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.givenUp[t]
}

// revoked stops, each with a final checkpoint within the hand-off bound,
// the tasks a rebalance takes from this worker, before the worker rejoins:
// only then does the group give them to their new owners.
func (m *member) revoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ts := m.tasksOf(lost)
	if len(ts) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() { m.w.stopTask(t, m.w.cfg.HandoffTimeout, "revoked by the group") })
	}
	wg.Wait()
	m.setMine(nil, ts)
	m.forget(ts)
}

// lost stops at once the tasks of a session the worker lost (it was
// silent past the session timeout: paused, partitioned): the group gave
// them to others already, who fence this worker's transactions.
func (m *member) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ts := m.tasksOf(lost)
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() { m.w.abortTask(t) })
	}
	wg.Wait()
	m.setMine(nil, ts)
	m.forget(ts)
	if len(ts) > 0 {
		m.w.log.Warn("group session lost: stopped its tasks", "tasks", ts)
	}
}

// describe asks the group coordinator for the group's members and what
// each was assigned.
func (m *member) describe(ctx context.Context) (status.Group, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{m.w.cfg.Group()}
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return status.Group{}, err
	}
	if len(resp.Groups) != 1 {
		return status.Group{}, fmt.Errorf("describe group: %d groups in the answer", len(resp.Groups))
	}
	g := resp.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
		return status.Group{}, err
	}
	self, gen := m.cl.GroupMetadata()
	out := status.Group{State: g.State, Generation: gen}
	for _, mem := range g.Members {
		gm := status.Member{ID: mem.MemberID, ClientID: mem.ClientID, Host: mem.ClientHost, Self: mem.MemberID == self}
		var meta membership.Meta
		if json.Unmarshal(mem.ProtocolMetadata, &meta) == nil {
			if meta.Host != "" {
				gm.Host = meta.Host
			}
			gm.HTTP = meta.HTTP
		}
		if a, err := membership.DecodeAssignment(mem.MemberAssignment); err == nil {
			gm.Tasks, gm.Epoch = a.Tasks, a.Epoch
		}
		out.Members = append(out.Members, gm)
	}
	slices.SortFunc(out.Members, func(a, b status.Member) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// advertised is addr with a wildcard host replaced by the host name, so
// that other members' status pages can link to it.
func advertised(addr, host string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() && host != "" {
		return net.JoinHostPort(host, port)
	}
	return addr
}
