package quiclb

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestIDsCarryTheServerID(t *testing.T) {
	sid := []byte{0xab, 0xcd, 0x01}
	g, err := NewConnectionIDGenerator(Config{ConfigID: 2, ServerID: sid, NonceLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	if g.ConnectionIDLen() != 12 {
		t.Fatalf("length %d", g.ConnectionIDLen())
	}
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, err := g.GenerateConnectionID()
		if err != nil {
			t.Fatal(err)
		}
		b := id.Bytes()
		if len(b) != 12 || b[0] != 2<<5|11 {
			t.Fatalf("ID %x: first octet %#x, want config 2 and length 12", b, b[0])
		}
		got, err := Decode(b, 2, 3)
		if err != nil || !bytes.Equal(got, sid) {
			t.Fatalf("Decode(%x): %x, %v", b, got, err)
		}
		if seen[string(b)] {
			t.Fatalf("ID %x issued twice", b)
		}
		seen[string(b)] = true
	}
	id, _ := g.GenerateConnectionID()
	if _, err := Decode(id.Bytes(), 3, 3); err != ErrNotRoutable {
		t.Errorf("another config's ID decoded: %v", err)
	}
	if _, err := Decode(id.Bytes()[:3], 2, 3); err != ErrNotRoutable {
		t.Errorf("a short ID decoded: %v", err)
	}
	unroutable := append([]byte{UnroutableConfig<<5 | 11}, id.Bytes()[1:]...)
	if _, err := Decode(unroutable, UnroutableConfig, 3); err != ErrNotRoutable {
		t.Errorf("an unroutable ID decoded: %v", err)
	}
}

// TestEncryptedIDsCarryTheServerID: with a key, every ID decrypts to the
// server ID, the IDs do not show it, and another key does not find it.
func TestEncryptedIDsCarryTheServerID(t *testing.T) {
	for _, nonce := range []int{6, 13} { // four passes; 3 + 13 = 16 bytes, one AES block
		sid := []byte{0xab, 0xcd, 0x01}
		g, err := NewConnectionIDGenerator(Config{ConfigID: 2, ServerID: sid, NonceLen: nonce, Key: &testKey})
		if err != nil {
			t.Fatal(err)
		}
		shown := 0
		for i := 0; i < 1000; i++ {
			id, err := g.GenerateConnectionID()
			if err != nil {
				t.Fatal(err)
			}
			b := id.Bytes()
			if len(b) != 1+3+nonce || b[0] != 2<<5|byte(3+nonce) {
				t.Fatalf("ID %x: first octet %#x", b, b[0])
			}
			got, err := DecodeEncrypted(b, 2, 3, nonce, testKey)
			if err != nil || !bytes.Equal(got, sid) {
				t.Fatalf("DecodeEncrypted(%x): %x, %v", b, got, err)
			}
			if bytes.Equal(b[1:4], sid) {
				shown++
			}
		}
		// By chance, one ID in 2^24 starts with it.
		if shown > 1 {
			t.Errorf("nonce %d: the server ID in the clear in %d of 1000 IDs", nonce, shown)
		}
		other := testKey
		other[0] ^= 1
		id, _ := g.GenerateConnectionID()
		if got, _ := DecodeEncrypted(id.Bytes(), 2, 3, nonce, other); bytes.Equal(got, sid) {
			t.Errorf("nonce %d: another key decrypts the server ID", nonce)
		}
	}
}

func TestConfigLimits(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ConfigID: 7, ServerID: []byte{1}, NonceLen: 4}, "config ID 7"},
		{Config{ServerID: nil, NonceLen: 4}, "server ID of 0 bytes"},
		{Config{ServerID: make([]byte, 16), NonceLen: 4}, "server ID of 16 bytes"},
		{Config{ServerID: []byte{1}, NonceLen: 3}, "nonce of 3 bytes"},
		{Config{ServerID: make([]byte, 15), NonceLen: 5}, "at most 20"},
	} {
		if _, err := NewConnectionIDGenerator(c.cfg); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := NewConnectionIDGenerator(Config{ConfigID: 6, ServerID: make([]byte, 15), NonceLen: 4}); err != nil {
		t.Errorf("the longest ID refused: %v", err)
	}
}

// TestQuicGoUsesTheIDs runs a real quic-go server with the generator and a
// client through a UDP relay that reads every packet the client sends: once
// the handshake is done the client addresses the server by IDs that carry
// its server ID, as a load balancer reads them.
func TestQuicGoUsesTheIDs(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) { quicGoUsesTheIDs(t, nil) })
	t.Run("encrypted", func(t *testing.T) { quicGoUsesTheIDs(t, &testKey) })
}

// testKey is the draft's test vectors' key.
var testKey = [16]byte{0x8f, 0x95, 0xf0, 0x92, 0x45, 0x76, 0x5f, 0x80, 0x25, 0x69, 0x34, 0xe5, 0x0c, 0x66, 0x20, 0x7f}

func quicGoUsesTheIDs(t *testing.T, key *[16]byte) {
	sid := []byte{0x5e, 0x01}
	g, err := NewConnectionIDGenerator(Config{ConfigID: 1, ServerID: sid, NonceLen: 6, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc, ConnectionIDGenerator: g}
	defer tr.Close()
	ln, err := tr.Listen(serverTLS(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				s, err := c.AcceptStream(context.Background())
				if err == nil {
					io.Copy(s, s)
				}
			}()
		}
	}()

	// The relay: the client's packets to the server, recorded.
	relay, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	var mu sync.Mutex
	var short [][]byte // the destination IDs of short-header packets
	go func() {
		var client *net.UDPAddr
		up, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
		if err != nil {
			return
		}
		defer up.Close()
		go func() {
			buf := make([]byte, 65536)
			for {
				n, err := up.Read(buf)
				if err != nil {
					return
				}
				mu.Lock()
				to := client
				mu.Unlock()
				relay.WriteToUDP(buf[:n], to)
			}
		}()
		buf := make([]byte, 65536)
		for {
			n, from, err := relay.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			client = from
			if n > g.ConnectionIDLen() && buf[0]&0xc0 == 0x40 { // short header: form 0, fixed bit 1
				short = append(short, append([]byte(nil), buf[1:1+g.ConnectionIDLen()]...))
			}
			mu.Unlock()
			up.Write(buf[:n])
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, relay.LocalAddr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"quiclb-test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := s.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo: %q %v", buf, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(short) == 0 {
		t.Fatal("the client sent no short-header packet")
	}
	for _, id := range short {
		got, err := Decode(id, 1, len(sid))
		if key != nil {
			got, err = DecodeEncrypted(id, 1, len(sid), 6, *key)
		}
		if err != nil || !bytes.Equal(got, sid) {
			t.Fatalf("the client addressed the server by %x: server ID %x, %v", id, got, err)
		}
	}
}

func serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"quiclb-test"}}
}

// TestRotating: a Rotating issues the IDs of the generator set last, and
// refuses one of another ID length.
func TestRotating(t *testing.T) {
	k1, k2 := [16]byte{1}, [16]byte{2}
	g1, err := NewConnectionIDGenerator(Config{ConfigID: 1, ServerID: []byte{0x5e, 1}, NonceLen: 6, Key: &k1})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := NewConnectionIDGenerator(Config{ConfigID: 2, ServerID: []byte{0x5e, 1}, NonceLen: 6, Key: &k2})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRotating(g1)
	for _, c := range []struct {
		g   *Generator
		rot uint8
		key [16]byte
	}{{g1, 1, k1}, {g2, 2, k2}} {
		if err := r.Set(c.g); err != nil {
			t.Fatal(err)
		}
		id, err := r.GenerateConnectionID()
		if err != nil {
			t.Fatal(err)
		}
		sid, err := DecodeEncrypted(id.Bytes(), c.rot, 2, 6, c.key)
		if err != nil || string(sid) != "\x5e\x01" || r.ConnectionIDLen() != id.Len() {
			t.Errorf("config %d: ID %x decodes to %x, %v", c.rot, id.Bytes(), sid, err)
		}
	}
	long, err := NewConnectionIDGenerator(Config{ConfigID: 3, ServerID: []byte{0x5e, 1, 2}, NonceLen: 6})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Set(long); err == nil {
		t.Error("a generator of longer IDs was taken")
	}
}
