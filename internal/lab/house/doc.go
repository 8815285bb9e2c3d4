// Package house holds the repository's house rules as tests: limits on
// the size of Go files and functions that keep each one readable in a
// sitting, and one way into the pipeline (the service reads and builds
// its config only through internal/change). It has no code of its own; `go test ./internal/lab/house`
// checks every Go file of the module outside tests and generated code,
// the lab's included.
package house
