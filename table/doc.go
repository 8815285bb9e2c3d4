// Package table is director's control plane in pure Go, with no kernel
// dependency, so that a change can be reviewed anywhere: the config's data
// model (tables, binds, backends, the director's settings), each table's
// 65,536 rows built from seeded SipHash rendezvous scores (in full, or
// incrementally for one backend's change), GLB's binary table format,
// fingerprints, and the diff of two sets of tables into a plan with a
// verdict. The binds' lookup as the datapath holds it is table/bindmap's.
//
// Reading the JSON that operators write is table/config's job; the loader
// puts what this package builds into the kernel; internal/datapath/model states what
// the XDP program does with it, packet by packet.
package table
