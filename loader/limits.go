// What the datapath can serve, checked before anything is built or written.

package loader

import (
	"fmt"

	"github.com/director/director/table"
)

// checkSources reports a table whose backends' family the director config
// has no outbound source for.
func checkSources(tables []*table.Table, c *table.DirectorConfig) error {
	if c == nil {
		return nil // nothing is steered until a config is live
	}
	var errs table.ErrorList
	for i, t := range tables {
		if len(t.Backends) == 0 {
			continue
		}
		named := ""
		if t.Name != "" {
			named = fmt.Sprintf(" (%q)", t.Name)
		}
		switch v6 := !t.Backends[0].IP.Is4(); {
		case v6 && !c.SrcIP6.IsValid():
			errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i),
				Msg: "its backends are IPv6, and the director config has no outbound_src_ip6 to send GUE over IPv6 from" + named})
		case !v6 && !c.SrcIP.IsValid():
			errs = append(errs, &table.FieldError{Path: fmt.Sprintf("tables[%d]", i),
				Msg: "its backends are IPv4, and the director config has no outbound_src_ip to send GUE from" + named})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
