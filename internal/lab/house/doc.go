// Package house holds the repository's house rules as tests: limits on
// the size of Go files and functions that keep each one readable in a
// sitting. It has no code of its own; `go test ./internal/lab/house`
// checks every Go file of the module outside tests and generated code,
// the lab's included.
package house
