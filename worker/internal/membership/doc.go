// Package membership is the protocol of the workers of one job in its Kafka
// consumer group: what a worker tells the group when it joins ([Meta]), what
// the group's leader hands each worker ([Assignment]), how the leader plans
// a round ([Plan]), and the kgo.GroupBalancer that carries them ([Balancer]).
//
// The workers of a job form one Kafka consumer group, used only for
// membership and assignment: tasks read their partitions by direct
// assignment from checkpointed offsets, never through the group. The group
// runs franz-go's classic (JoinGroup/SyncGroup) protocol with [Balancer],
// cooperative like Kafka's CooperativeStickyAssignor and Kafka
// Connect's incremental protocol: a rebalance moves only the tasks it must,
// and a task that moves is first given up by its owner (a final checkpoint)
// in one round, then given to its new owner in the next. The classic
// protocol is the one where the leader's balancer decides, and it can hand
// each member bytes of its own (here: the fencing epoch); KIP-848's
// server-side assignors cannot.
//
// franz-go tracks the assignment as partitions of the first input topic:
// partition p stands for task p (partition p of every input topic). The
// worker pauses fetching that topic, so the group client reads nothing.
//
// [Plan] is pure: it takes what each member owns and returns what each runs
// after the round, and holds every rule of the rebalance. The Balancer only
// encodes, decodes and allocates the round's fencing epoch.
//
// The caller (the worker) runs the franz-go group client with a Balancer,
// pauses fetching Topics[0], starts the tasks franz-go assigns it with
// [Balancer.CurrentEpoch] and stops the ones it revokes. Its duties: every
// worker of a job runs this package's protocol on the same Topics; Meta says where
// the worker's status page is; GivenUp leaves out of the join the tasks a
// newer owner claimed; NewEpoch allocates epochs larger than every one
// before (checkpoint.NextEpoch), so that each round fences the last.
package membership
