package quiclb

import (
	"fmt"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// Rotating issues the IDs of the generator it holds now: a server moved to
// a new config (a new key, in a table listing both configs: docs/operations.md,
// "Rotating a QUIC-LB key") by Set keeps its connections, which go on with
// the IDs they have, while new IDs name the new config. quic-go gives
// every ID of a transport one length, so each generator Set must issue IDs
// of the first's length. It implements quic-go's ConnectionIDGenerator.
type Rotating struct {
	cur atomic.Pointer[Generator]
	n   int
}

// NewRotating is a Rotating issuing g's IDs.
func NewRotating(g *Generator) *Rotating {
	r := &Rotating{n: g.ConnectionIDLen()}
	r.cur.Store(g)
	return r
}

// Set makes g's the IDs issued from now on.
func (r *Rotating) Set(g *Generator) error {
	if g.ConnectionIDLen() != r.n {
		return fmt.Errorf("quiclb: IDs of %d bytes where the transport's are %d: a config rotated to on one transport keeps the ID length", g.ConnectionIDLen(), r.n)
	}
	r.cur.Store(g)
	return nil
}

// GenerateConnectionID issues a new ID of the generator Set last.
func (r *Rotating) GenerateConnectionID() (quic.ConnectionID, error) {
	return r.cur.Load().GenerateConnectionID()
}

// ConnectionIDLen is the length of every ID r issues.
func (r *Rotating) ConnectionIDLen() int { return r.n }
