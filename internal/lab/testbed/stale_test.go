package testbed

import (
	"fmt"
	"os"
	"testing"

	"github.com/director/director/internal/lab/testenv"
)

// TestClearStaleLeavesLiveRunsPins: a testbed clears the pins of crashed
// runs, never those of a run still going ('go test ./...' builds several
// packages' testbeds at once; one had removed another's director under it).
func TestClearStaleLeavesLiveRunsPins(t *testing.T) {
	testenv.Kernel(t)
	live := fmt.Sprintf("/sys/fs/bpf/%s%d-be9", pinPrefix, os.Getpid())
	dead := fmt.Sprintf("/sys/fs/bpf/%s%d", pinPrefix, 1<<22+1) // above pid_max's default
	for _, d := range []string{live, dead} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	ClearStale()
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live run's pins were removed: %v", err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead run's pins were left: %v", err)
	}
}
