package loader

import (
	"fmt"
	"maps"
	"testing"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

func TestDriverDropsSumsQueues(t *testing.T) {
	got := driverDrops(map[string]uint64{
		"rx_queue_0_xdp_drops": 2, "rx_queue_1_xdp_drops": 3, "tx_queue_0_xdp_tx_drops": 1,
		"rx_queue_0_xdp_packets": 100, "rx_xdp_drop": 7,
	})
	want := map[string]uint64{"rx_xdp_drops": 5, "tx_xdp_tx_drops": 1, "rx_xdp_drop": 7}
	if !maps.Equal(got, want) {
		t.Errorf("driverDrops: %v, want %v", got, want)
	}
	// virtio_net on 6.x: each queue's, and the sums, which are taken.
	got = driverDrops(map[string]uint64{"rx0_xdp_drops": 1, "rx1_xdp_drops": 2, "rx_xdp_drops": 3, "tx0_xdp_tx_drops": 4, "rx_packets": 9})
	want = map[string]uint64{"rx_xdp_drops": 3, "tx_xdp_tx_drops": 4}
	if !maps.Equal(got, want) {
		t.Errorf("driverDrops: %v, want %v", got, want)
	}
}

// TestDriverCounters reads a veth's driver name and counters through the
// ethtool ioctls, as 'stats' does for an attached interface.
func TestDriverCounters(t *testing.T) {
	testenv.Kernel(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("drv0", "drv1"); err != nil {
			return err
		}
		if drv, err := driverOf("drv0"); err != nil || drv != "veth" {
			return fmt.Errorf("driver %q, %v", drv, err)
		}
		st, err := driverStats("drv0")
		if err != nil {
			return err
		}
		if _, ok := st["rx_queue_0_xdp_packets"]; !ok {
			return fmt.Errorf("veth's counters lack rx_queue_0_xdp_packets: %v", st)
		}
		if _, ok := driverDrops(st)["rx_xdp_drops"]; !ok {
			return fmt.Errorf("no rx_xdp_drops among %v", driverDrops(st))
		}
		if a := xdpTxAdvice("drv0"); a != "" {
			return fmt.Errorf("advice for a veth: %s", a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
