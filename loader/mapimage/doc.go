// Package mapimage computes what the datapath's maps must hold, in pure Go:
// the limits a config is checked against before anything is built
// (MaxTables, Limit, CheckDatapath) and the images of maps the loader
// writes (a table's QUIC-LB server-ID index). It imports no kernel code,
// so that the planning side (internal/change, plan, the service's
// judging) can check what the datapath can serve on any OS; the loader
// writes the images it makes.
package mapimage
