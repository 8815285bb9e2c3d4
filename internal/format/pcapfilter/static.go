//go:build nolibpcap

package pcapfilter

import "fmt"

// load refuses: a static binary has no dynamic loader to dlopen libpcap
// with.
func load() error {
	return fmt.Errorf("%w: this director is a static build (make build STATIC=1), which cannot load it; "+
		"capture without an expression (--table, --backend, --interface and --action select), or use the dynamic build", ErrNoLibpcap)
}
