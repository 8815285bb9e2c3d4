// A backend's healthchecks block: which checks, their URI and their timing.

package config

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/table"
)

func (p *parser) healthchecks(path string, v *jsonValue) *table.Healthchecks {
	h := &table.Healthchecks{}
	if !p.object(path, v, "http", "http_uri", "gue", "fou", "tcp") {
		return h
	}
	for _, m := range v.members {
		if m.key == "http_uri" {
			if m.val.kind != jsonString {
				p.fail(join(path, m.key), "%s is not a string", m.val.brief())
			} else if err := CheckHTTPURI(m.val.str); err != nil {
				p.fail(join(path, m.key), "%q: %v", m.val.str, err)
			} else {
				s := m.val.str
				h.HTTPURI = &s
			}
			continue
		}
		n, ok := p.port(join(path, m.key), m.val)
		if !ok {
			continue
		}
		port := int(n)
		switch m.key {
		case "http":
			h.HTTP = &port
		case "gue":
			h.GUE = &port
		case "fou":
			h.FOU = &port
		case "tcp":
			h.TCP = &port
		}
	}
	return h
}

// CheckHTTPURI says why uri cannot be a health check's http_uri: it must
// be an absolute path, with a query if wanted, and nothing that could be
// read as naming another host or scheme (the check's address and port are
// the backend's alone).
func CheckHTTPURI(uri string) error {
	switch {
	case uri == "":
		return errors.New("empty: leave http_uri out for /")
	case uri[0] != '/':
		return errors.New("not an absolute path: it must start with /")
	case strings.Contains(uri, "//"):
		return errors.New("// would start a host name")
	case strings.Contains(uri, "@"):
		return errors.New("@ would start a host name")
	case strings.Contains(uri, `\`):
		return errors.New(`\ is read as / by some servers`)
	case strings.Contains(uri, "#"):
		return errors.New("a fragment (#) is not sent")
	}
	for _, r := range uri {
		switch {
		case r == ' ':
			return errors.New("a space is not allowed (write %20)")
		case r < 0x20 || r == 0x7f:
			return errors.New("a control character is not allowed")
		case r > 0x7e:
			return errors.New("only ASCII is allowed (percent-encode the rest)")
		}
	}
	return nil
}

// checkSettings parses the top-level "healthchecks" block.
func (p *parser) checkSettings(path string, v *jsonValue) table.CheckSettings {
	c := table.DefaultCheckSettings()
	if !p.object(path, v, "interval_ms", "timeout_ms", "trigger", "rise", "fall") {
		return c
	}
	num := func(key string, lo, hi int64) (int64, bool) {
		f := v.get(key)
		if f == nil {
			return 0, false
		}
		n, err := strconv.ParseInt(f.num.String(), 10, 64)
		if f.kind != jsonNumber || err != nil || n < lo || n > hi {
			p.fail(join(path, key), "%s is not a whole number from %d to %d", f.brief(), lo, hi)
			return 0, false
		}
		return n, true
	}
	if n, ok := num("interval_ms", 10, 3600_000); ok {
		c.Interval = time.Duration(n) * time.Millisecond
	}
	if n, ok := num("timeout_ms", 1, 600_000); ok {
		c.Timeout = time.Duration(n) * time.Millisecond
	}
	if n, ok := num("trigger", 1, 100); ok {
		c.Rise, c.Fall = int(n), int(n)
	}
	if n, ok := num("rise", 1, 100); ok {
		c.Rise = int(n)
	}
	if n, ok := num("fall", 1, 100); ok {
		c.Fall = int(n)
	}
	if c.Timeout > c.Interval {
		p.fail(join(path, "timeout_ms"), "%d ms is longer than interval_ms %d: a check would still run when the next starts",
			c.Timeout.Milliseconds(), c.Interval.Milliseconds())
	}
	return c
}
