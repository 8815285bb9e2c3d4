// Package daemon is what the two services, 'director run' and 'director
// backend run', share as processes: systemd's readiness notice, an HTTP
// server (metrics, status) that no number of idle or slow clients can
// exhaust, and a start that fails leaving no pins behind.
package daemon
