// Package docs holds weir's documentation (the Markdown files next to this
// one) and the tests that keep it true. It has no code of its own.
//
// docs_test.go extracts every command line from the ```sh blocks of the
// repository's README.md, docs/*.md and examples/*/README.md and requires
// each to be classified in its table: run by the test itself, in the order
// of its page and with stated substitutions (the test's broker for $B,
// temporary directories for /tmp paths, unique topic and job names), or
// named with the test or .ci/run step that runs it instead. A command in no
// row fails the test, naming its file and line, so that no new command in
// the docs goes unrun. names_test.go checks that every flag, environment
// variable and metric the docs name exists, that every settings file in
// them is valid, and that their links lead somewhere.
//
// Duties of whoever edits the docs: run `go test ./docs/`; when it names an
// unclassified command, add a row for it to the table in docs_test.go.
package docs
