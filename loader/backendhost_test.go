package loader

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/lab/testenv"
)

// TestSockDiagTellsNoHandlerFromNoSocket: sock_diag answers ENOENT both
// for a socket that does not exist and for a protocol whose handler the
// kernel lacks (tcp_diag is a module on the cloud kernels), so backend
// explain would say "no socket" where it cannot know. The probe tells
// them apart; a protocol no handler serves stands in for a missing
// tcp_diag.
func TestSockDiagTellsNoHandlerFromNoSocket(t *testing.T) {
	testenv.Kernel(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	local := netip.MustParseAddrPort(l.Addr().String())
	remote := netip.MustParseAddrPort("127.0.0.1:1")
	if state, err := sockDiag(unix.IPPROTO_TCP, local, remote, false); err != nil || state != tcpListen {
		t.Fatalf("the listener: state %d, %v", state, err)
	}
	gone := netip.AddrPortFrom(local.Addr(), 1)
	if _, err := sockDiag(unix.IPPROTO_TCP, gone, remote, false); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("no socket: %v, want ENOENT", err)
	}
	if _, err := sockDiag(unix.IPPROTO_TCP, gone, remote, true); !errors.Is(err, errNoAnswer) {
		t.Fatalf("the TCP handler's probe: %v, want no answer (the handler is there: tcp_diag loaded)", err)
	}
	const noHandler = 200 // no protocol number with a sock_diag handler
	if _, err := sockDiag(noHandler, gone, remote, true); err == nil || errors.Is(err, errNoAnswer) {
		t.Fatalf("the probe of a protocol without a handler: %v, want an error", err)
	}

	h := &BackendHost{}
	if found, _ := h.Socket(remote, gone); found || h.Err != nil {
		t.Fatalf("no socket: found %v, err %v", found, h.Err)
	}
}
