// Package xdpmode names the two ways director attaches an XDP program, for
// the loader and the lab alike: native (in the driver) and generic (in the
// stack, for interfaces whose driver has no XDP).
package xdpmode

import (
	"fmt"

	"github.com/cilium/ebpf/link"
)

const (
	Native  = "native"
	Generic = "generic"
)

// Flags is the attach flag for mode, or an error naming what is accepted.
func Flags(mode string) (link.XDPAttachFlags, error) {
	switch mode {
	case Native:
		return link.XDPDriverMode, nil
	case Generic:
		return link.XDPGenericMode, nil
	}
	return 0, fmt.Errorf("mode %q: want %s or %s", mode, Native, Generic)
}
