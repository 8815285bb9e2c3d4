// Package table is director's control plane in pure Go, with no kernel
// dependency, so that a change can be reviewed anywhere: it parses and
// validates GLB's forwarding-table JSON and director.conf, builds each
// table's 65,536 rows from seeded SipHash rendezvous scores (in full, or
// incrementally for one backend's change), reads and writes GLB's binary
// table format, fingerprints tables, compiles binds into the datapath's
// lookup, and diffs two sets of tables into a plan with a verdict.
//
// The loader puts what this package builds into the kernel; internal/model
// states what the XDP program does with it, packet by packet.
package table
