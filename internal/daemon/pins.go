package daemon

import (
	"errors"
	"log/slog"
	"os"

	"github.com/director/director/loader"
)

// UndoFreshPins is how a start that fails leaves nothing it made: when
// dir does not exist yet, the function it returns removes it (detached
// and unloaded) if told the start failed; pins that were there are kept,
// as they may be serving. Deferred before the run lock is taken, it runs
// after the lock and the handles are released.
func UndoFreshPins(dir string, log *slog.Logger) func(failed bool) {
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return func(bool) {}
	}
	return func(failed bool) {
		if !failed {
			return
		}
		if err := loader.Unload(dir); err != nil {
			log.Error("the failed start left pins behind", "bpffs", dir, "err", err)
		}
	}
}
