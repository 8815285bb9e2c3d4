package testbed

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/explain"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table"
	"github.com/director/director/table/quiclb"
)

// QUIC through the testbed: each backend can run a quic-go server on
// VIP:QUICPort that issues QUIC-LB connection IDs carrying its server ID
// (table/quiclb), answering lines as the TCP servers do; the client opens
// QUIC sessions to it, and can move one to a new local port (quic-go's
// path migration) while it runs.

// QUICPort is the UDP port the QUIC servers listen on.
const QUICPort = 443

// QUICSettings are the testbed's QUIC-LB settings: config rotation 1,
// two-byte server IDs, six-byte nonces, encrypted (the four-pass
// construction) as production servers issue them, with the draft's test
// key.
var QUICSettings = table.QUICConfig{ConfigID: 1, ServerIDLen: 2, NonceLen: 6, Encrypted: true,
	Key: table.Key{0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f}}

// QUICServerID is backend i's server ID: 0x5e, i.
func QUICServerID(i int) table.ServerID { return table.ServerID([]byte{0x5e, byte(i)}) }

const quicALPN = "director-testbed"

// quicConfig is both sides': a dead peer is noticed in seconds, and no
// path MTU probes (their packets, over the link's MTU once encapsulated,
// are answered with ICMP too-big, which is another test's).
func quicConfig() *quic.Config {
	return &quic.Config{MaxIdleTimeout: testenv.Scaled(5 * time.Second), KeepAlivePeriod: time.Second,
		DisablePathMTUDiscovery: true}
}

type quicServer struct {
	pc  *net.UDPConn // quic-go leaves a Transport's own socket to its owner
	tr  *quic.Transport
	ln  *quic.Listener
	gen *quiclb.Rotating
}

var serverTLS = sync.OnceValues(func() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"vip.testbed"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{quicALPN}}, nil
})

// ServeQUIC starts backend i's (from 1) QUIC server, issuing IDs of
// QUICSettings with QUICServerID(i).
func (tb *Testbed) ServeQUIC(i int) error {
	if tb.quic[i] != nil {
		return fmt.Errorf("backend%d serves QUIC already", i)
	}
	conf, err := serverTLS()
	if err != nil {
		return err
	}
	g, err := quicGenerator(i, QUICSettings)
	if err != nil {
		return err
	}
	gen := quiclb.NewRotating(g)
	h := tb.Backends[i-1]
	srv := quicServer{gen: gen}
	err = h.Do(func() error {
		pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: VIP.AsSlice(), Port: QUICPort})
		if err != nil {
			return err
		}
		srv.pc = pc
		srv.tr = &quic.Transport{Conn: pc, ConnectionIDGenerator: gen}
		srv.ln, err = srv.tr.Listen(conf, quicConfig())
		if err != nil {
			srv.tr.Close()
			pc.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("backend%d: QUIC server: %w", i, err)
	}
	if tb.quic == nil {
		tb.quic = map[int]*quicServer{}
	}
	tb.quic[i] = &srv
	go func() {
		for {
			c, err := srv.ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				for {
					s, err := c.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go echo(h.Name, s)
				}
			}()
		}
	}()
	return nil
}

// quicGenerator issues backend i's IDs (QUICServerID(i)) of config c.
func quicGenerator(i int, c table.QUICConfig) (*quiclb.Generator, error) {
	cfg := quiclb.Config{ConfigID: c.ConfigID, ServerID: []byte(QUICServerID(i)), NonceLen: int(c.NonceLen)}
	if c.Encrypted {
		key := [16]byte(c.Key)
		cfg.Key = &key
	}
	return quiclb.NewConnectionIDGenerator(cfg)
}

// RotateQUIC moves backend i's QUIC server to config c, as step 2 of a key
// rotation does (docs/operations.md, "Rotating a QUIC-LB key"): the IDs it
// issues from now on are c's; its connections keep theirs.
func (tb *Testbed) RotateQUIC(i int, c table.QUICConfig) error {
	srv := tb.quic[i]
	if srv == nil {
		return fmt.Errorf("backend%d serves no QUIC", i)
	}
	g, err := quicGenerator(i, c)
	if err != nil {
		return err
	}
	return srv.gen.Set(g)
}

// StopQUIC closes backend i's QUIC server and every connection it holds:
// the service is down.
func (tb *Testbed) StopQUIC(i int) {
	if srv := tb.quic[i]; srv != nil {
		srv.ln.Close()
		srv.tr.Close()
		srv.pc.Close()
		delete(tb.quic, i)
	}
}

// quicClient is a QUIC session's connection and the transports (UDP
// sockets) it has used.
type quicClient struct {
	mu   sync.Mutex
	conn *quic.Conn
	trs  []*quic.Transport
	str  *quic.Stream
}

func (q *quicClient) Read(p []byte) (int, error)    { return q.str.Read(p) }
func (q *quicClient) Write(p []byte) (int, error)   { return q.str.Write(p) }
func (q *quicClient) SetDeadline(t time.Time) error { return q.str.SetDeadline(t) }

func (q *quicClient) port() uint16 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return uint16(q.trs[len(q.trs)-1].Conn.LocalAddr().(*net.UDPAddr).Port)
}

// Close closes the connection and its sockets.
func (q *quicClient) Close() error {
	q.conn.CloseWithError(0, "")
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, tr := range q.trs {
		tr.Close()
		tr.Conn.Close() // the socket is ours (Transport.Close leaves it)
	}
	return nil
}

// transport is a QUIC transport on a new UDP socket of the client's.
func (tb *Testbed) transport() (*quic.Transport, error) {
	var tr *quic.Transport
	err := tb.Client.Do(func() error {
		pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ClientIP.AsSlice()})
		if err != nil {
			return err
		}
		tr = &quic.Transport{Conn: pc}
		return nil
	})
	return tr, err
}

// OpenQUIC opens a QUIC connection from the client to VIP:QUICPort and a
// stream on it, and does a first exchange, which names the backend.
func (tb *Testbed) OpenQUIC(id int) (*Session, error) {
	tr, err := tb.transport()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(5*time.Second))
	defer cancel()
	conn, err := tr.Dial(ctx, &net.UDPAddr{IP: VIP.AsSlice(), Port: QUICPort},
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{quicALPN}}, quicConfig())
	if err != nil {
		tr.Close()
		tr.Conn.Close()
		return nil, fmt.Errorf("QUIC connection %d: %w", id, err)
	}
	q := &quicClient{conn: conn, trs: []*quic.Transport{tr}}
	if q.str, err = conn.OpenStreamSync(ctx); err != nil {
		q.Close()
		return nil, fmt.Errorf("QUIC connection %d: a stream: %w", id, err)
	}
	s := &Session{ID: id, conn: q, quic: q, stop: make(chan struct{}), done: make(chan struct{})}
	s.r = bufio.NewReader(q)
	who, err := s.exchange(0)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("QUIC connection %d: first exchange: %w", id, err)
	}
	s.Backend = who
	return s, nil
}

// Migrate moves a QUIC session to a new local port while it runs: a new
// UDP socket, a path probed and switched to (RFC 9000, section 9), as a
// client moving networks does. A path that cannot be validated is an
// error: the client has left its old network, so the connection is lost.
// The old socket stays open (closing it would close the connection in
// quic-go), but nothing is sent from it once the path is switched.
//
// The new port is one whose 4-tuple's row (in the live table, as the
// reference model reads it) has another backend than the session's as
// its primary: the move always goes where a 4-tuple hash would break the
// connection, so that only routing by connection ID can keep it.
func (tb *Testbed) Migrate(s *Session) error {
	q := s.quic
	if q == nil {
		return fmt.Errorf("connection %d is not QUIC", s.ID)
	}
	tr, err := tb.transportAway(BackendIP(BackendIndex(s.Backend)))
	if err != nil {
		return fmt.Errorf("QUIC connection %d: %w", s.ID, err)
	}
	q.mu.Lock()
	q.trs = append(q.trs, tr)
	q.mu.Unlock()
	p, err := q.conn.AddPath(tr)
	if err != nil {
		return fmt.Errorf("QUIC connection %d: a new path: %w", s.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(5*time.Second))
	defer cancel()
	if err := p.Probe(ctx); err != nil {
		return fmt.Errorf("QUIC connection %d: probing the path from port %d: %w", s.ID, q.port(), err)
	}
	if err := p.Switch(); err != nil {
		return fmt.Errorf("QUIC connection %d: switching to port %d: %w", s.ID, q.port(), err)
	}
	return nil
}

// transportAway is a client socket whose flow to VIP:QUICPort has a row
// whose primary is not backend.
func (tb *Testbed) transportAway(backend netip.Addr) (*quic.Transport, error) {
	d, err := tb.OpenDirector()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	live, err := d.LiveState()
	if err != nil {
		return nil, err
	}
	if live.Config == nil {
		return nil, errors.New("no director config is live")
	}
	var gw [6]byte
	copy(gw[:], live.Config.GatewayMAC)
	dp := model.New(*live.Config, gw, live.Tables)
	for range 64 {
		tr, err := tb.transport()
		if err != nil {
			return nil, err
		}
		port := uint16(tr.Conn.LocalAddr().(*net.UDPAddr).Port)
		// No payload: a packet too short for QUIC follows its row.
		x := explain.Explain(dp, pkt.Frame(pkt.IPv4(ClientIP, VIP, 17, pkt.UDP(port, QUICPort, nil), pkt.V4Opts{})))
		if len(x.Hops) > 0 && x.Hops[0].Addr != backend.String() {
			return tr, nil
		}
		tr.Close()
	}
	return nil, fmt.Errorf("no port of 64 has a row away from %s", backend)
}

// SpreadQUIC opens n short QUIC connections and counts which backend each
// landed on.
func (tb *Testbed) SpreadQUIC(n int) (map[string]int, error) {
	got := map[string]int{}
	for i := 0; i < n; i++ {
		s, err := tb.OpenQUIC(200000 + i)
		if err != nil {
			return got, err
		}
		got[s.Backend]++
		s.Stop()
	}
	return got, nil
}

// QUICConfig is the testbed's table with a UDP bind on QUICPort beside
// the TCP one, and, when routing, a quic block of QUICSettings and each
// backend's QUICServerID.
func QUICConfig(states map[int]string, healthy map[int]bool, n int, routing bool) string {
	cfg := BackendConfig(states, healthy, n)
	cfg = strings.Replace(cfg, `"binds": [`, fmt.Sprintf(`"binds": [{"ip": "%s", "proto": "udp", "port": %d}, `, VIP, QUICPort), 1)
	if !routing {
		return cfg
	}
	q := QUICSettings
	cfg = strings.Replace(cfg, `"binds": [`, fmt.Sprintf(`"quic": {"config_id": %d, "server_id_len": %d, "nonce_len": %d, "key": "%x"}, "binds": [`,
		q.ConfigID, q.ServerIDLen, q.NonceLen, q.Key[:]), 1)
	for i := 1; i <= n; i++ {
		cfg = strings.Replace(cfg, fmt.Sprintf(`{"ip": "%s"`, BackendIP(i)),
			fmt.Sprintf(`{"ip": "%s", "server_id": "%s"`, BackendIP(i), QUICServerID(i)), 1)
	}
	return cfg
}

// QUICRotationConfig is QUICConfig with routing by the list of configs cs
// (config rotation), every backend i's server ID QUICServerID(i) in each.
func QUICRotationConfig(n int, cs ...table.QUICConfig) string {
	cfg := QUICConfig(nil, nil, n, false)
	var list []string
	for _, q := range cs {
		c := fmt.Sprintf(`{"config_id": %d, "server_id_len": %d, "nonce_len": %d`, q.ConfigID, q.ServerIDLen, q.NonceLen)
		if q.Encrypted {
			c += fmt.Sprintf(`, "key": "%x"`, q.Key[:])
		}
		list = append(list, c+"}")
	}
	cfg = strings.Replace(cfg, `"binds": [`, `"quic": [`+strings.Join(list, ", ")+`], "binds": [`, 1)
	for i := 1; i <= n; i++ {
		cfg = strings.Replace(cfg, fmt.Sprintf(`{"ip": "%s"`, BackendIP(i)),
			fmt.Sprintf(`{"ip": "%s", "server_id": "%s"`, BackendIP(i), QUICServerID(i)), 1)
	}
	return cfg
}
