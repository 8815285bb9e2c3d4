//go:build !nolibpcap

package pcapfilter

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

func load() error {
	lib.once.Do(func() {
		var h uintptr
		var errs []string
		for _, name := range []string{"libpcap.so.0.8", "libpcap.so.1", "libpcap.so"} {
			var err error
			if h, err = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
				break
			}
			errs = append(errs, err.Error())
		}
		if h == 0 {
			lib.err = fmt.Errorf("%w: %s", ErrNoLibpcap, strings.Join(errs, "; "))
			return
		}
		purego.RegisterLibFunc(&lib.openDead, h, "pcap_open_dead")
		purego.RegisterLibFunc(&lib.compile, h, "pcap_compile")
		purego.RegisterLibFunc(&lib.geterr, h, "pcap_geterr")
		purego.RegisterLibFunc(&lib.freecode, h, "pcap_freecode")
		purego.RegisterLibFunc(&lib.closeP, h, "pcap_close")
	})
	return lib.err
}
