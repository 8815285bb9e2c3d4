//go:build !linux

package pcapfile

func populate([]byte) bool { return false }

func adviseSequential([]byte) {}
