package main

import (
	"io"
	"os"

	"github.com/director/director/table"
)

// writeOutput writes a command's -o FILE: aside and renamed into place
// (table.WriteFileAtomic, which refuses symbolic links), or, for "-", to
// stdout.
func (e *env) writeOutput(path string, mode os.FileMode, write func(io.Writer) error) error {
	if path == "-" {
		return write(e.stdout)
	}
	return table.WriteFileAtomic(path, mode, write)
}

// reportTo is the env a command with output path tells its story through:
// e itself, or, when the output goes to stdout ("-"), e with its stdout
// sent to stderr, so that the output stays what it is.
func (e *env) reportTo(path string) *env {
	if path != "-" {
		return e
	}
	r := *e
	r.stdout = e.stderr
	return &r
}

// wrote names where output went, for "wrote FILE" lines.
func wrote(path string) string {
	if path == "-" {
		return "stdout"
	}
	return path
}
