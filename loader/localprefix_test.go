package loader

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestLocalPrefixesTakeTentativeAddresses: an IPv6 address whose
// duplicate address detection has not run (its link down, as at boot) has
// no local route yet, and is taken all the same, so that a backend attached
// then takes GUE for it; a /24 on lo is taken whole, its own address under
// it, and loopback's and link-local addresses are not.
func TestLocalPrefixesTakeTentativeAddresses(t *testing.T) {
	testenv.Kernel(t)
	var got []netip.Prefix
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("lp0", "lp1"); err != nil {
			return err
		}
		l, _ := netlink.LinkByName("lp0")
		if err := netlink.LinkSetDown(l); err != nil {
			return err
		}
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		for _, ad := range []struct {
			l netlink.Link
			a string
		}{{l, "fd50::11/64"}, {l, "10.50.0.11/24"}, {lo, "10.86.0.0/24"}} {
			a, _ := netlink.ParseAddr(ad.a)
			if err := netlink.AddrAdd(ad.l, a); err != nil {
				return err
			}
		}
		var err error
		got, err = LocalPrefixes()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fd50::11/128", "10.50.0.11/32", "10.86.0.0/24"} {
		if !slices.Contains(got, netip.MustParsePrefix(want)) {
			t.Errorf("local prefixes %v lack %s", got, want)
		}
	}
	for _, p := range got {
		if a := p.Addr(); a.IsLoopback() || a.IsLinkLocalUnicast() || (p.Bits() == 32 && netip.MustParsePrefix("10.86.0.0/24").Contains(a)) {
			t.Errorf("local prefixes %v hold %s", got, p)
		}
	}
}

// TestLocalPrefixesWhileAddressesChange: addresses added and removed
// while the prefixes are listed (as at boot, when duplicate address
// detection ends and DHCP runs) interrupt the kernel's dumps; the list is
// taken again rather than failing, so 'backend attach' does not fail for
// a race with the host's own setup.
func TestLocalPrefixesWhileAddressesChange(t *testing.T) {
	testenv.Kernel(t)
	var failed error
	err := testrun.InNetns(func() error {
		lo, _ := netlink.LinkByName("lo")
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// Enough addresses that a dump takes several messages.
		for i := 0; i < 600; i++ {
			a, _ := netlink.ParseAddr(fmt.Sprintf("10.91.%d.%d/32", i/250, 1+i%250))
			if err := netlink.AddrAdd(lo, a); err != nil {
				return err
			}
		}
		// How long a listing takes here, unchurned: changes come at a
		// few times that apart, so that a listing is often interrupted
		// (each of 200 would be, without the retries) and a retry often
		// is not. At a fixed pace, a slow guest's listings (an emulated
		// arm64) outlasted every gap, and no number of retries could do.
		var took []time.Duration
		for range 5 {
			start := time.Now()
			if _, err := LocalPrefixes(); err != nil {
				return err
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		gap := max(3*took[2], 200*time.Microsecond)
		t.Logf("a listing takes %v; an address changes every %v", took[2], gap)
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE) // this namespace's, for the churn; routing only: not every kernel has the other families
		if err != nil {
			return err
		}
		defer h.Close()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			a, _ := netlink.ParseAddr("10.92.0.1/32")
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.AddrAdd(lo, a)
				h.AddrDel(lo, a)
				time.Sleep(gap)
			}
		}()
		for i := 0; i < 200 && failed == nil; i++ {
			_, failed = LocalPrefixes()
		}
		close(stop)
		<-done
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if failed != nil {
		t.Fatal(failed)
	}
}
