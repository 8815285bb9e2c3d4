// Package quiclb issues QUIC connection IDs that carry a server ID, in the
// formats of QUIC-LB (draft-ietf-quic-load-balancers): unencrypted
// ("plaintext"), or with a key, encrypted as the draft specifies, so that a load balancer can send every packet of a
// connection to the server that holds it, whatever the client's address
// and port: after a change of the forwarding table, after a NAT rebinding,
// after a client's migration to another network. docs/wire.md, "QUIC-LB
// connection IDs", gives the format byte by byte.
//
// A connection ID is 1 + ServerIDLen + NonceLen bytes:
//
//	byte 0         config rotation (3 bits: ConfigID) | length (5 bits: the ID's length less one)
//	bytes 1..L     the server ID
//	bytes L+1..    the nonce: random, fresh for each ID
//
// With a Key, bytes 1 to L+N are the server ID and nonce encrypted
// together (package cidcipher): an observer cannot tell two IDs of one
// server, or of one connection, apart from any others.
//
// For quic-go, give a Generator as the Transport's ConnectionIDGenerator:
//
//	gen, err := quiclb.NewConnectionIDGenerator(quiclb.Config{ConfigID: 0, ServerID: id, NonceLen: 8})
//	tr := &quic.Transport{Conn: udpConn, ConnectionIDGenerator: gen}
//
// with the same ConfigID, server ID length, nonce length and key as the
// table's "quic" block, and this server's "server_id" (docs/config.md).
package quiclb

import (
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"

	"github.com/director/director/table"
	"github.com/director/director/table/quiclb/cidcipher"
)

// Limits of the format: three bits of config rotation, of which 0b111 is
// kept for IDs no load balancer routes, and at most 20 bytes in all (QUIC
// v1's longest connection ID).
const (
	MaxConfigID    = table.MaxQUICConfigID
	MaxServerIDLen = table.MaxServerIDLen
	MinNonceLen    = table.MinNonceLen
	MaxIDLen       = table.MaxCIDLen
	// UnroutableConfig is the config rotation of an ID that names no
	// server: a load balancer routes such a packet as any other.
	UnroutableConfig = MaxConfigID + 1
)

// Config is what a server needs to issue IDs: the table's config rotation
// and nonce length, and its own server ID (whose length is the table's
// server_id_len).
type Config struct {
	ConfigID uint8
	ServerID []byte
	NonceLen int
	// Key, when not nil, encrypts the IDs (the table's "key"). A secret.
	Key *[16]byte
}

// Len is the length of the IDs c issues.
func (c Config) Len() int { return 1 + len(c.ServerID) + c.NonceLen }

// Check says what is wrong with c, or nil.
func (c Config) Check() error {
	switch {
	case c.ConfigID > MaxConfigID:
		return fmt.Errorf("config ID %d: from 0 to %d (%d marks IDs no load balancer routes)", c.ConfigID, MaxConfigID, UnroutableConfig)
	case len(c.ServerID) < 1 || len(c.ServerID) > MaxServerIDLen:
		return fmt.Errorf("server ID of %d bytes: from 1 to %d", len(c.ServerID), MaxServerIDLen)
	case c.NonceLen < MinNonceLen:
		return fmt.Errorf("nonce of %d bytes: at least %d", c.NonceLen, MinNonceLen)
	case c.Len() > MaxIDLen:
		return fmt.Errorf("1 + %d + %d bytes: a connection ID has at most %d", len(c.ServerID), c.NonceLen, MaxIDLen)
	}
	return nil
}

// Generator issues c's connection IDs. It implements quic-go's
// ConnectionIDGenerator.
type Generator struct {
	c      Config
	cipher *cidcipher.Cipher // nil: plaintext IDs
}

// NewConnectionIDGenerator checks c and returns its generator.
func NewConnectionIDGenerator(c Config) (*Generator, error) {
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("quiclb: %w", err)
	}
	c.ServerID = append([]byte(nil), c.ServerID...)
	g := &Generator{c: c}
	if c.Key != nil {
		var err error
		if g.cipher, err = cidcipher.New(*c.Key, len(c.ServerID), c.NonceLen); err != nil {
			return nil, fmt.Errorf("quiclb: %w", err)
		}
	}
	return g, nil
}

// Append appends a new connection ID to b.
func (g *Generator) Append(b []byte) ([]byte, error) {
	n := g.c.Len()
	b = append(b, g.c.ConfigID<<5|byte(n-1))
	b = append(b, g.c.ServerID...)
	nonce := make([]byte, g.c.NonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("quiclb: a nonce: %w", err)
	}
	b = append(b, nonce...)
	if g.cipher != nil {
		plain := b[len(b)-g.cipher.Len():]
		g.cipher.Encrypt(plain, append([]byte(nil), plain...))
	}
	return b, nil
}

// GenerateConnectionID issues a new connection ID (quic-go's
// ConnectionIDGenerator).
func (g *Generator) GenerateConnectionID() (quic.ConnectionID, error) {
	b, err := g.Append(make([]byte, 0, MaxIDLen))
	if err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(b), nil
}

// ConnectionIDLen is the length of every ID g issues (quic-go's
// ConnectionIDGenerator).
func (g *Generator) ConnectionIDLen() int { return g.c.Len() }

// ErrNotRoutable is what Decode gives for an ID that names no server of
// the config: another config's, the unroutable one's, or too short.
var ErrNotRoutable = errors.New("not a routable ID of this config")

// Decode reads the server ID from a connection ID of the config whose
// rotation is configID and whose server IDs are serverIDLen bytes, as a
// load balancer does. It reads only what the load balancer reads: the
// first octet's rotation bits, then the server ID.
func Decode(cid []byte, configID uint8, serverIDLen int) ([]byte, error) {
	if len(cid) < 1+serverIDLen || cid[0]>>5 != configID || configID > MaxConfigID {
		return nil, ErrNotRoutable
	}
	return cid[1 : 1+serverIDLen], nil
}

// DecodeEncrypted is Decode for encrypted IDs of a config whose nonces are
// nonceLen bytes and whose key is key: the server ID decrypted, as a load
// balancer reads it.
func DecodeEncrypted(cid []byte, configID uint8, serverIDLen, nonceLen int, key [16]byte) ([]byte, error) {
	c, err := cidcipher.New(key, serverIDLen, nonceLen)
	if err != nil {
		return nil, err
	}
	if len(cid) < 1+c.Len() || cid[0]>>5 != configID || configID > MaxConfigID {
		return nil, ErrNotRoutable
	}
	sid := make([]byte, serverIDLen)
	c.ServerID(sid, cid[1:1+c.Len()])
	return sid, nil
}
