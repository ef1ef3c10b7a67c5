// Package cli holds what weir's commands share to read their settings:
// flags that can also be set from the environment (--some-flag as
// WEIR_SOME_FLAG) and, for the worker, from a YAML file; flag types for
// lists and sizes; and UsageError, the error of a bad setting (exit code 2).
//
// Precedence, lowest first: the defaults in the flag set, the file, the
// environment, the command line.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UsageError is a bad command line or setting: the process exits with 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// NewFlagSet returns a flag set that reports errors instead of exiting.
func NewFlagSet(cmd, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\n%s\n\nEvery flag can also be set from the environment: --some-flag as WEIR_SOME_FLAG.\n\n", cmd, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// EnvName is the environment variable of a flag: WEIR_<FLAG_UPPER_SNAKE>.
func EnvName(flag string) string {
	return "WEIR_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// FlagOf is the flag of an environment variable EnvName made, "" for a
// variable that is not one of weir's.
func FlagOf(env string) string {
	name, ok := strings.CutPrefix(env, "WEIR_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

// Parse sets fs's flags from the environment (lookup, os.LookupEnv in a
// binary), then from args, so that the command line wins.
func Parse(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	return ParseWithFile(fs, args, lookup, "")
}

// ParseWithFile is Parse with a settings file first: if fileFlag is not
// empty, the flag of that name (from args or the environment) names a YAML
// file whose top-level keys are flag names; a list value stands for its
// items joined with commas. An unknown key fails, naming the file and the key.
func ParseWithFile(fs *flag.FlagSet, args []string, lookup func(string) (string, bool), fileFlag string) error {
	if fileFlag != "" {
		path, ok := flagValue(args, fileFlag)
		if !ok {
			path, _ = lookup(EnvName(fileFlag))
		}
		if path != "" {
			if err := setFromFile(fs, path, fileFlag); err != nil {
				return UsageError{err}
			}
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookup(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (--%s): %v", EnvName(f.Name), v, f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return UsageError{err}
	}
	if err := fs.Parse(args); err != nil {
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return UsageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

// flagValue finds --name VALUE or --name=VALUE (one dash too) in args,
// before a "--".
func flagValue(args []string, name string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return "", false
		}
		if !strings.HasPrefix(a, "-") {
			continue // another flag's value
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// setFromFile sets flags from the YAML file at path.
func setFromFile(fs *flag.FlagSet, path, fileFlag string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--%s: %w", fileFlag, err)
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("--%s %s: not a YAML mapping of settings: %w", fileFlag, path, err)
	}
	var errs []error
	for key, node := range doc {
		if key == fileFlag || fs.Lookup(key) == nil {
			errs = append(errs, fmt.Errorf("%s: unknown setting %q (the keys are the flag names, as in %q)", path, key, "brokers"))
			continue
		}
		v, err := scalarOrList(&node)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s (line %d): %v", path, key, node.Line, err))
			continue
		}
		if err := fs.Set(key, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %q: %v", path, key, v, err))
		}
	}
	return errors.Join(errs...)
}

func scalarOrList(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.SequenceNode:
		items := make([]string, len(n.Content))
		for i, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("a list of lists or mappings is not a setting")
			}
			items[i] = c.Value
		}
		return strings.Join(items, ","), nil
	}
	return "", errors.New("want a value or a list of values")
}

// List is a comma-separated list of strings.
type List struct{ V *[]string }

func (l List) String() string {
	if l.V == nil {
		return ""
	}
	return strings.Join(*l.V, ",")
}

func (l List) Set(s string) error {
	*l.V = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.V = append(*l.V, p)
		}
	}
	return nil
}

// Ints is a comma-separated list of integers; empty means none.
type Ints struct{ V *[]int }

func (l Ints) String() string {
	if l.V == nil {
		return ""
	}
	s := make([]string, len(*l.V))
	for i, n := range *l.V {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l Ints) Set(s string) error {
	*l.V = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("%q is not an integer", p)
		}
		*l.V = append(*l.V, n)
	}
	return nil
}

// Bytes is a size in bytes: a plain integer or one with a binary unit
// (64MiB, 64M, 512KiB, 1G).
type Bytes struct{ V *int64 }

func (b Bytes) String() string {
	if b.V == nil {
		return ""
	}
	n := *b.V
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.unit
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b.V = n
	return nil
}

// ParseBytes reads a size as Bytes does.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	digits, unit := t, ""
	if i >= 0 {
		digits, unit = t[:i], strings.TrimSpace(t[i:])
	}
	if digits == "" {
		return 0, fmt.Errorf("%q is not a size, want e.g. 67108864, 64MiB or 64M", s)
	}
	mult := int64(1)
	switch strings.ToLower(unit) {
	case "", "b":
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("%q: unknown unit %q, want bytes or K, M, G, KiB, MiB, GiB", s, unit)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size, want e.g. 67108864, 64MiB or 64M", s)
	}
	return n * mult, nil
}

// CheckBrokers reports bad --brokers values.
func CheckBrokers(brokers []string) []error {
	if len(brokers) == 0 {
		return []error{errors.New("--brokers: required: at least one host:port")}
	}
	var errs []error
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("--brokers: %q is not host:port", b))
		}
	}
	return errs
}
