package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weirstream/weir/checkpoint"
)

// Graph is a job's dataflow graph under construction. Nodes are added by the
// generic constructors of this package (Source, Map, KeyedProcess, ...),
// which the typed builder in package stream wraps. Errors found while
// building are recorded, not returned one by one: Plan returns all of them.
type Graph struct {
	name  string
	nodes []*node
	names map[string]bool
	errs  []error
	// committers are the two-phase-commit sinks, by operator name.
	committers map[string]Committer
	// oneTask names the operators that key by moving records between
	// tasks without a way to move them (a KeyBy built with no Kafka to
	// shuffle through): the plan is correct only when task 0 runs alone.
	oneTask []string
	// keyBys counts the KeyBys whose keys follow the partitioner (not
	// LocalKeyBy): the job's state is placed by it.
	keyBys int
}

// Fail records an error found while building, for Plan to return.
func (g *Graph) Fail(err error) { g.errs = append(g.errs, err) }

// OneTask records that operator needs every record in one task: a plan
// with one refuses to start any task but 0.
func (g *Graph) OneTask(operator string) { g.oneTask = append(g.oneTask, operator) }

// NewGraph starts the graph of the job called name.
func NewGraph(name string) *Graph {
	g := &Graph{name: name, names: map[string]bool{}, committers: map[string]Committer{}}
	if name == "" {
		g.errorf("job name must not be empty")
	} else if strings.ContainsAny(name, "/ \t\n") {
		g.errorf("job name %q must not contain '/' or white space", name)
	}
	return g
}

// Name is the job's name.
func (g *Graph) Name() string { return g.name }

func (g *Graph) errorf(format string, args ...any) {
	g.errs = append(g.errs, fmt.Errorf(format, args...))
}

type nodeKind int

const (
	kindSource nodeKind = iota
	kindOperator
	kindMulti
	kindSink
)

// node is the untyped description of one operator of the graph. The typed
// parts live in the closures: build instantiates the operator for one task.
type node struct {
	id        int
	name      string
	kind      nodeKind
	inputs    []*node
	consumers int
	// build creates this node's instance for task t. Nodes are built in
	// reverse order of creation, so every consumer exists before its
	// producer asks for its endpoints.
	build func(t *task) error
}

func (g *Graph) add(name string, kind nodeKind, inputs ...*node) *node {
	n := &node{id: len(g.nodes), name: name, kind: kind, inputs: inputs}
	switch {
	case name == "":
		g.errorf("operator %d: name must not be empty", n.id)
	case strings.ContainsAny(name, "/ \t\n"):
		g.errorf("operator %q: name must not contain '/' or white space", name)
	case !checkpoint.PrintableName(name):
		g.errorf("operator %q: name must be UTF-8 without control characters (it names the operator's objects in checkpoint storage)", name)
	case g.names[name]:
		g.errorf("operator %q: name used twice (names identify state in checkpoints)", name)
	}
	g.names[name] = true
	for i, in := range inputs {
		if in == nil {
			g.errorf("operator %q: input %d is nil", name, i)
			continue
		}
		in.consumers++
	}
	g.nodes = append(g.nodes, n)
	return n
}

// Port is a typed output of a node: a stream of T that later nodes consume.
type Port[T any] struct {
	g         *Graph
	n         *node
	consumers []func(t *task) endpoint[T]
}

// Graph is the graph the port belongs to.
func (p *Port[T]) Graph() *Graph { return p.g }

// Name is the name of the node that produces the port's records.
func (p *Port[T]) Name() string { return p.n.name }

func newPort[T any](g *Graph, n *node) *Port[T] { return &Port[T]{g: g, n: n} }

// connect registers input index idx of consumer c as a consumer of p.
func connect[T any](p *Port[T], c *node, idx int) {
	p.consumers = append(p.consumers, func(t *task) endpoint[T] {
		return t.endpoints[c.id][idx].(endpoint[T])
	})
}

// output builds the endpoint a producer emits into for task t: its only
// consumer, a fan-out to several, or a sink that drops records when the
// stream is not consumed.
func (p *Port[T]) output(t *task) endpoint[T] {
	switch len(p.consumers) {
	case 0:
		return discard[T]{}
	case 1:
		return p.consumers[0](t)
	}
	f := make(fanout[T], len(p.consumers))
	for i, c := range p.consumers {
		f[i] = c(t)
	}
	return f
}

// Plan is a validated graph, ready to run.
type Plan struct {
	g *Graph
}

// Name is the job's name.
func (p *Plan) Name() string { return p.g.name }

// Keyed says whether the plan keys state across tasks by the partitioner
// (a KeyBy; a LocalKeyBy's keys are the task's own).
func (p *Plan) Keyed() bool { return p.g.keyBys > 0 }

// Committer returns the two-phase-commit sink named name (nil if none).
func (p *Plan) Committer(name string) Committer { return p.g.committers[name] }

// Operators lists the names of the plan's operators in creation order.
func (p *Plan) Operators() []string {
	names := make([]string, len(p.g.nodes))
	for i, n := range p.g.nodes {
		names[i] = n.name
	}
	return names
}

// Plan validates the graph and returns every error found, joined.
func (g *Graph) Plan() (*Plan, error) {
	errs := append([]error(nil), g.errs...)
	sources, sinks := 0, 0
	for _, n := range g.nodes {
		switch n.kind {
		case kindSource:
			sources++
		case kindSink:
			sinks++
		}
	}
	if sources == 0 {
		errs = append(errs, errors.New("job has no source"))
	}
	if sinks == 0 {
		errs = append(errs, errors.New("job has no sink"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("job %q: %w", g.name, err)
	}
	return &Plan{g: g}, nil
}
