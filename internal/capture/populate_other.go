//go:build !linux

package capture

func populate([]byte) bool { return false }

func adviseSequential([]byte) {}
