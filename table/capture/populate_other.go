//go:build !linux

package capture

func populate([]byte, <-chan struct{}) {}
