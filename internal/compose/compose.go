// Package compose reads the parts of a Docker Compose file and a Dockerfile
// that weir's deployment tests check and run: services with their image,
// build, command, environment, ports, dependencies and healthchecks, and a
// Dockerfile's stages. It knows YAML anchors and merge keys (through the
// YAML decoder) and compose's "$$" escape; it rejects variable
// interpolation, which a test could not resolve the way compose does.
package compose

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is a compose file.
type File struct {
	Name     string             `yaml:"name"`
	Services map[string]Service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

// Service is one service of a compose file.
type Service struct {
	Image       string       `yaml:"image"`
	Build       *Build       `yaml:"build"`
	Entrypoint  List         `yaml:"entrypoint"`
	Command     List         `yaml:"command"`
	Environment Env          `yaml:"environment"`
	Ports       []string     `yaml:"ports"`
	DependsOn   Deps         `yaml:"depends_on"`
	Healthcheck *Healthcheck `yaml:"healthcheck"`
	Deploy      *struct {
		Replicas *int `yaml:"replicas"`
	} `yaml:"deploy"`
	Restart         string `yaml:"restart"`
	StopGracePeriod string `yaml:"stop_grace_period"`
}

// Build is a service's build section.
type Build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

// Healthcheck is a service's healthcheck.
type Healthcheck struct {
	Test     List   `yaml:"test"`
	Interval string `yaml:"interval"`
	Timeout  string `yaml:"timeout"`
	Retries  int    `yaml:"retries"`
}

// Replicas is how many containers `docker compose up` starts (deploy.replicas,
// default 1).
func (s Service) Replicas() int {
	if s.Deploy != nil && s.Deploy.Replicas != nil {
		return *s.Deploy.Replicas
	}
	return 1
}

// Script returns the shell script of a service run as `sh -c SCRIPT`
// (entrypoint ["sh", "-c"] with the script as command, or the whole of it
// as command), and false for any other service.
func (s Service) Script() (string, bool) {
	argv := append(slices.Clone(s.Entrypoint), s.Command...)
	if len(argv) == 3 && (argv[0] == "sh" || argv[0] == "/bin/sh" || argv[0] == "bash") && argv[1] == "-c" {
		return argv[2], true
	}
	return "", false
}

// Exec returns a healthcheck's command: the words after CMD, or the shell
// line after CMD-SHELL as ["sh", "-c", line].
func (h Healthcheck) Exec() ([]string, error) {
	if len(h.Test) < 2 {
		return nil, fmt.Errorf("healthcheck test %q: want CMD or CMD-SHELL and a command", h.Test)
	}
	switch h.Test[0] {
	case "CMD":
		return h.Test[1:], nil
	case "CMD-SHELL":
		return []string{"sh", "-c", strings.Join(h.Test[1:], " ")}, nil
	}
	return nil, fmt.Errorf("healthcheck test %q: want CMD or CMD-SHELL first", h.Test)
}

// List is a command: a YAML list, or one string split on blanks (compose
// splits it shell-style; these files use no quotes in string commands).
type List []string

func (l *List) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = strings.Fields(n.Value)
		return nil
	}
	var s []string
	err := n.Decode(&s)
	*l = s
	return err
}

// Env is a service's environment, in either compose spelling: a map or a
// list of KEY=VALUE.
type Env map[string]string

func (e *Env) UnmarshalYAML(n *yaml.Node) error {
	m := map[string]string{}
	switch n.Kind {
	case yaml.MappingNode:
		if err := n.Decode(&m); err != nil {
			return err
		}
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", n.Line)
	}
	*e = m
	return nil
}

// Lookup is os.LookupEnv over the environment.
func (e Env) Lookup(k string) (string, bool) {
	v, ok := e[k]
	return v, ok
}

// Deps maps each service a service depends on to the condition it waits
// for; the list spelling means service_started.
type Deps map[string]string

func (d *Deps) UnmarshalYAML(n *yaml.Node) error {
	out := map[string]string{}
	if n.Kind == yaml.MappingNode {
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			out[k] = v.Condition
			if v.Condition == "" {
				out[k] = "service_started"
			}
		}
	} else {
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, k := range list {
			out[k] = "service_started"
		}
	}
	*d = out
	return nil
}

// Load reads a compose file. Values may use "$$" for a literal "$"; other
// interpolation fails, naming the line.
func Load(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := unescape(&root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var f File
	if err := root.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Services) == 0 {
		return nil, fmt.Errorf("%s: no services", path)
	}
	return &f, nil
}

var interpolation = regexp.MustCompile(`\$[{A-Za-z_]`)

// unescape turns compose's "$$" into "$" in every scalar and fails on
// variables ($VAR, ${VAR}).
func unescape(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		rest := strings.ReplaceAll(n.Value, "$$", "")
		if interpolation.MatchString(rest) {
			return fmt.Errorf("line %d: %q uses variable interpolation, which these tests do not resolve", n.Line, n.Value)
		}
		n.Value = strings.ReplaceAll(n.Value, "$$", "$")
		return nil
	}
	for _, c := range n.Content {
		if err := unescape(c); err != nil {
			return err
		}
	}
	return nil
}

// DependsOn reports whether service from reaches service to through
// depends_on, directly or not.
func (f *File) DependsOn(from, to string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(s string) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		for dep := range f.Services[s].DependsOn {
			if dep == to || walk(dep) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

// Order returns the services in an order that starts each after what it
// depends on, or an error naming a cycle or an unknown dependency.
func (f *File) Order() ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string, []string) error
	visit = func(s string, path []string) error {
		switch state[s] {
		case 1:
			return fmt.Errorf("depends_on cycle: %s", strings.Join(append(path, s), " -> "))
		case 2:
			return nil
		}
		svc, ok := f.Services[s]
		if !ok {
			return fmt.Errorf("%s depends on unknown service %s", path[len(path)-1], s)
		}
		state[s] = 1
		deps := make([]string, 0, len(svc.DependsOn))
		for d := range svc.DependsOn {
			deps = append(deps, d)
		}
		slices.Sort(deps)
		for _, d := range deps {
			if err := visit(d, append(path, s)); err != nil {
				return err
			}
		}
		state[s] = 2
		order = append(order, s)
		return nil
	}
	names := make([]string, 0, len(f.Services))
	for n := range f.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Stage is one stage of a Dockerfile.
type Stage struct {
	Name       string // AS name; "" if unnamed
	From       string // base image or stage
	Args       []string
	Env        map[string]string
	Runs       []string // RUN lines, in order
	Copies     [][]string
	Workdir    string
	User       string
	Entrypoint []string
	Cmd        []string
}

// ParseDockerfile reads the stages of a Dockerfile: FROM, ARG, ENV (KEY=VALUE
// form), RUN, COPY, WORKDIR, USER, and exec-form ENTRYPOINT and CMD.
// Continuation lines are joined; other instructions fail, naming the line.
func ParseDockerfile(path string) ([]Stage, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var stages []Stage
	var logical string
	start := 0
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if logical == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if logical == "" {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			logical += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		logical += trimmed
		if err := addInstruction(&stages, logical); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, start, err)
		}
		logical = ""
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", path)
	}
	return stages, nil
}

func addInstruction(stages *[]Stage, line string) error {
	word, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	word = strings.ToUpper(word)
	if word == "FROM" {
		f := strings.Fields(rest)
		s := Stage{From: f[0], Env: map[string]string{}}
		if len(f) == 3 && strings.EqualFold(f[1], "AS") {
			s.Name = f[2]
		} else if len(f) != 1 {
			return fmt.Errorf("FROM %s: want IMAGE [AS NAME]", rest)
		}
		*stages = append(*stages, s)
		return nil
	}
	if len(*stages) == 0 {
		return fmt.Errorf("%s before FROM", word)
	}
	s := &(*stages)[len(*stages)-1]
	switch word {
	case "ARG":
		s.Args = append(s.Args, rest)
	case "ENV":
		for _, kv := range strings.Fields(rest) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("ENV %s: want KEY=VALUE", rest)
			}
			s.Env[k] = v
		}
	case "RUN":
		s.Runs = append(s.Runs, rest)
	case "COPY":
		s.Copies = append(s.Copies, strings.Fields(rest))
	case "WORKDIR":
		s.Workdir = rest
	case "USER":
		s.User = rest
	case "ENTRYPOINT", "CMD":
		var argv []string
		if err := yaml.Unmarshal([]byte(rest), &argv); err != nil || !strings.HasPrefix(rest, "[") {
			return fmt.Errorf("%s %s: want the exec form [\"...\"]", word, rest)
		}
		if word == "CMD" {
			s.Cmd = argv
		} else {
			s.Entrypoint = argv
		}
	default:
		return errors.New("unknown instruction " + word)
	}
	return nil
}

// StageOf returns the stage named name, or the last stage (the default
// target) for "".
func StageOf(stages []Stage, name string) (Stage, bool) {
	if name == "" {
		return stages[len(stages)-1], true
	}
	for _, s := range stages {
		if s.Name == name {
			return s, true
		}
	}
	return Stage{}, false
}
