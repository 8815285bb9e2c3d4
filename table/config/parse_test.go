package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/director/director/table"
)

const (
	testKey  = "12345678901234561234567890123456"
	testSeed = "34567890123456783456789012345678"
)

func TestParseExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/configs/*.json")
	if len(files) < 5 {
		t.Fatalf("found %d example configs", len(files))
	}
	for _, f := range files {
		if _, err := ParseFile(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestParseConfigValues(t *testing.T) {
	c, err := Parse([]byte(`{"tables": [{"name": "api", "hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80},
	            {"ip": "10.10.20.0/24", "proto": "udp", "port_start": 1000, "port_end": 2000},
	            {"ip": "fdb4:98ce:52d4::42", "proto": "tcp", "port": 443}],
	  "backends": [{"ip": "192.168.50.10", "state": "active", "healthy": true,
	                "healthchecks": {"http": 80, "gue": 19523}},
	               {"ip": "fd00::1", "state": "filling", "healthy": false}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Tables[0]
	if tc.Name != "api" || len(tc.Binds) != 3 || len(tc.Backends) != 2 {
		t.Fatalf("parsed %+v", tc)
	}
	if b := tc.Binds[1]; b.Prefix.String() != "10.10.20.0/24" || b.Proto != table.ProtoUDP || b.PortStart != 1000 || b.PortEnd != 2000 {
		t.Errorf("bind 1 = %+v", b)
	}
	if b := tc.Binds[2]; b.Prefix.Bits() != 128 || !b.Prefix.Addr().Is6() || b.PortStart != 443 || b.PortEnd != 443 {
		t.Errorf("bind 2 = %+v", b)
	}
	if b := tc.Backends[1]; b.State != table.StateFilling || b.Healthy || b.IP.String() != "fd00::1" {
		t.Errorf("backend 1 = %+v", b)
	}
	if h := tc.Backends[0].Healthchecks; h == nil || *h.HTTP != 80 || *h.GUE != 19523 {
		t.Errorf("healthchecks = %+v", h)
	}
	if tc.HashKey[0] != 0x12 || tc.Seed[15] != 0x78 {
		t.Errorf("keys not decoded")
	}
}

// table wraps fragments into a one-table config for error tests.
func cfg(table string) string { return `{"tables": [` + table + `]}` }

func tbl(extra string) string {
	return `{"hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}]` + extra + `}`
}

func goodBackends() string {
	return `, "backends": [{"ip": "10.1.0.1", "state": "active", "healthy": true}]`
}

func TestParseConfigErrors(t *testing.T) {
	backends := func(bs ...string) string { return `, "backends": [` + strings.Join(bs, ",") + `]` }
	for _, c := range []struct {
		name, in string
		want     []string // each must appear in the error
	}{
		{"not json", `{"tables": [`, []string{"invalid JSON: line 1"}},
		{"trailing", `{"tables": []} x`, []string{"invalid JSON"}},
		{"no tables", `{}`, []string{"tables: missing"}},
		{"unknown top", `{"tables": [], "tabels": 1}`, []string{"tabels: unknown field"}},
		{"table not object", `{"tables": [3]}`, []string{"tables[0]: 3 is not an object"}},
		{"unknown table field", cfg(tbl(goodBackends() + `, "hash_fields": 1`)), []string{"tables[0].hash_fields: unknown field"}},
		{"duplicate key", cfg(tbl(goodBackends() + `, "seed": "` + testSeed + `"`)), []string{"tables[0].seed: appears more than once"}},
		{"bad backend ip", cfg(tbl(backends(`{"ip": "10.0.0.300", "state": "active", "healthy": true}`))),
			[]string{`tables[0].backends[0].ip: "10.0.0.300" is not an IP address`}},
		{"zone", cfg(tbl(backends(`{"ip": "fe80::1%eth0", "state": "active", "healthy": true}`))),
			[]string{`tables[0].backends[0].ip: "fe80::1%eth0" is not an IP address`}},
		{"mapped", cfg(tbl(backends(`{"ip": "::ffff:10.1.0.1", "state": "active", "healthy": true}`))),
			[]string{`tables[0].backends[0].ip: "::ffff:10.1.0.1" is an IPv4-mapped IPv6 address: write it as 10.1.0.1`}},
		{"healthy string", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": "true"}`))),
			[]string{`tables[0].backends[0].healthy: "true" is not true or false`}},
		{"bad state", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "up", "healthy": true}`))),
			[]string{`tables[0].backends[0].state: "up" is not a state`}},
		{"duplicate backend", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true}`,
			`{"ip": "10.1.0.2", "state": "active", "healthy": true}`, `{"ip": "10.1.0.1", "state": "draining", "healthy": true}`))),
			[]string{`tables[0].backends[2].ip: "10.1.0.1" is also tables[0].backends[0]`}},
		{"no backends", cfg(tbl(`, "backends": []`)), []string{"tables[0].backends: empty"}},
		{"all inactive", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "inactive", "healthy": true}`))),
			[]string{"tables[0].backends: every backend is inactive"}},
		{"unknown backend field", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "wieght": 3}`))),
			[]string{"tables[0].backends[0].wieght: unknown field"}},
		{"weight 0", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "weight": 0}`))),
			[]string{`tables[0].backends[0].weight: 0 is not a weight: to take a backend's rows away, set its state to "draining" (it keeps its connections) or "inactive"`}},
		{"weight too big", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "weight": 65536}`))),
			[]string{"tables[0].backends[0].weight: 65536 is not a weight (1-65535)"}},
		{"weight fraction", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "weight": 1.5}`))),
			[]string{"tables[0].backends[0].weight: 1.5 is not a whole number from 1 to 65535"}},
		{"bad domain", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "domain": "rack a"}`))),
			[]string{`tables[0].backends[0].domain: "rack a" is not a failure domain (1-64 of A-Z a-z 0-9 . _ -)`}},
		{"empty domain", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "domain": ""}`))),
			[]string{`tables[0].backends[0].domain: "" is not a failure domain`}},
		{"ramp interval", cfg(tbl(goodBackends() + `, "ramp_interval_s": 0`)),
			[]string{"tables[0].ramp_interval_s: 0 is not a number of seconds from 1 to 86400"}},
		{"balance factor under 1", cfg(tbl(goodBackends() + `, "balance_factor": 0.99`)),
			[]string{"tables[0].balance_factor: 0.99 is not a number from 1.0 to 2.0 (the most primary rows a backend may have, as a multiple of its fair share)"}},
		{"balance factor over 2", cfg(tbl(goodBackends() + `, "balance_factor": 2.5`)),
			[]string{"tables[0].balance_factor: 2.5 is not a number from 1.0 to 2.0 (the most primary rows a backend may have, as a multiple of its fair share)"}},
		{"balance factor string", cfg(tbl(goodBackends() + `, "balance_factor": "1.1"`)),
			[]string{`tables[0].balance_factor: "1.1" is not a number from 1.0 to 2.0 (the most primary rows a backend may have, as a multiple of its fair share)`}},
		{"balance factor precision", cfg(tbl(goodBackends() + `, "balance_factor": 1.0105`)),
			[]string{"tables[0].balance_factor: 1.0105 has more than three decimals"}},
		{"ramp interval string", cfg(tbl(goodBackends() + `, "ramp_interval_s": "60"`)),
			[]string{`tables[0].ramp_interval_s: "60" is not a number of seconds from 1 to 86400`}},
		{"history window", cfg(tbl(goodBackends() + `, "history_s": 70000`)),
			[]string{"tables[0].history_s: 70000 is not a number of seconds from 0 to 65535"}},
		{"history window string", cfg(tbl(goodBackends() + `, "history_s": "600"`)),
			[]string{`tables[0].history_s: "600" is not a number of seconds from 0 to 65535`}},
		{"history hops", cfg(tbl(goodBackends() + `, "history_hops": 1`)),
			[]string{"tables[0].history_hops: 1 is not true or false"}},
		{"weight string", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "weight": "3"}`))),
			[]string{`tables[0].backends[0].weight: "3" is not a number`}},
		{"bad healthcheck", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthy": true, "healthchecks": {"http": 70000}}`))),
			[]string{"tables[0].backends[0].healthchecks.http: 70000 is not a port"}},
		{"a director config", `{"outbound_gateway_mac": "02:00:00:00:00:03", "outbound_src_ip": "192.0.2.1", "hash_fields": {"src_addr": true}}`,
			[]string{"this is a director config (director.conf), not a forwarding-table config: give it with --director-config FILE"}},
		// Every problem in one pass: an overlap among the binds that
		// parse is reported beside a bind that does not.
		{"overlap beside a bad bind", `{"tables": [{"hash_key": "` + testKey + `", "seed": "` + testSeed + `",
		  "binds": [{"ip": "10.0.0.1/33", "proto": "tcp", "port": 80}, {"ip": "10.0.0.2", "proto": "tcp", "port": 80}]` + goodBackends() + `},
		  {"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.2", "proto": "tcp", "port": 80}]` + goodBackends() + `}]}`,
			[]string{`tables[0].binds[0].ip: "10.0.0.1/33" has prefix length 33`, "overlaps tables[0].binds[1]"}},
		// http_uri is a path on the backend: nothing in it may name a host.
		{"http_uri with a host", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "@10.99.0.10:80/"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "@10.99.0.10:80/": not an absolute path: it must start with /`}},
		{"http_uri with userinfo", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "/x@10.99.0.10/"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "/x@10.99.0.10/": @ would start a host name`}},
		{"http_uri scheme", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "http://10.99.0.10/"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "http://10.99.0.10/": not an absolute path`}},
		{"http_uri authority", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "//10.99.0.10/"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "//10.99.0.10/": // would start a host name`}},
		{"http_uri space", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "/a b"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "/a b": a space is not allowed`}},
		{"http_uri control", cfg(tbl(backends(`{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "/a\r\nHost: x"}}`))),
			[]string{`tables[0].backends[0].healthchecks.http_uri: "/a\r\nHost: x": a control character is not allowed`}},
		{"short key", cfg(`{"hash_key": "1234", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}]` + goodBackends() + `}`),
			[]string{"tables[0].hash_key: must be exactly 32 hex digits, got 4 characters"}},
		{"non-hex seed", cfg(`{"hash_key": "` + testKey + `", "seed": "zz567890123456783456789012345678", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}]` + goodBackends() + `}`),
			[]string{"tables[0].seed: must be exactly 32 hex digits, found a non-hex character"}},
		{"no binds", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": []` + goodBackends() + `}`),
			[]string{"tables[0].binds: empty"}},
		{"bad proto", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "sctp", "port": 80}]` + goodBackends() + `}`),
			[]string{`tables[0].binds[0].proto: "sctp" is not a protocol`}},
		{"port range", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 65536}]` + goodBackends() + `}`),
			[]string{"tables[0].binds[0].port: 65536 is not a port"}},
		{"port fraction", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80.5}]` + goodBackends() + `}`),
			[]string{"tables[0].binds[0].port: 80.5 is not a port"}},
		{"start after end", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port_start": 90, "port_end": 80}]` + goodBackends() + `}`),
			[]string{"tables[0].binds[0]: port_start 90 is greater than port_end 80"}},
		{"half range", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port_start": 90}]` + goodBackends() + `}`),
			[]string{"tables[0].binds[0].port_end: missing"}},
		{"no port", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp"}]` + goodBackends() + `}`),
			[]string{"tables[0].binds[0]: needs port"}},
		{"mapped bind", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "::ffff:10.0.0.1", "proto": "tcp", "port": 80}]` + goodBackends() + `}`),
			[]string{`tables[0].binds[0].ip: "::ffff:10.0.0.1" is an IPv4-mapped IPv6 address: write it as 10.0.0.1`}},
		{"long prefix", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.0/33", "proto": "tcp", "port": 80}]` + goodBackends() + `}`),
			[]string{`tables[0].binds[0].ip: "10.0.0.0/33" has prefix length 33, longer than the 32 bits`}},
		{"long v6 prefix", cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "fd00::/129", "proto": "tcp", "port": 80}]` + goodBackends() + `}`),
			[]string{"has prefix length 129"}},
		{"duplicate names", `{"tables": [` + strings.Replace(tbl(goodBackends()), "{", `{"name": "a",`, 1) + `,` +
			strings.Replace(tbl(goodBackends()), "{", `{"name": "a",`, 1) + `]}`,
			[]string{`tables[1].name: "a" is already the name of tables[0]`}},
		{"bad name", cfg(strings.Replace(tbl(goodBackends()), "{", `{"name": "a b",`, 1)), []string{`tables[0].name: "a b" is not a valid name`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			if err == nil {
				t.Fatalf("accepted %s", c.in)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), testKey) || strings.Contains(err.Error(), testSeed) || strings.Contains(err.Error(), "zz5678") {
				t.Errorf("error leaks a secret: %q", err)
			}
		})
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	in := cfg(`{"hash_key": "x", "seed": "y", "binds": [{"ip": "nope", "proto": "tcp", "port": 1}],
	  "backends": [{"ip": "10.0.0.300", "state": "active", "healthy": true}, {"ip": "10.0.0.2", "state": "on", "healthy": true}]}`)
	_, err := Parse([]byte(in))
	var list table.ErrorList
	if !asErrorList(err, &list) || len(list) != 5 {
		t.Fatalf("want 5 problems, got %v", err)
	}
}

func asErrorList(err error, l *table.ErrorList) bool {
	el, ok := err.(table.ErrorList)
	*l = el
	return ok
}

func TestLimits(t *testing.T) {
	var bs []string
	for i := 0; i < table.MaxBackends+1; i++ {
		bs = append(bs, `{"ip": "10.2.`+strconv.Itoa(i/256)+`.`+strconv.Itoa(i%256)+`", "state": "active", "healthy": true}`)
	}
	_, err := Parse([]byte(cfg(tbl(`, "backends": [` + strings.Join(bs, ",") + `]`))))
	if err == nil || !strings.Contains(err.Error(), "257 backends, more than GLB's limit of 256") {
		t.Fatalf("257 backends: %v", err)
	}
	if _, err := Parse([]byte(cfg(tbl(`, "backends": [` + strings.Join(bs[:256], ",") + `]`)))); err != nil {
		t.Fatalf("256 backends: %v", err)
	}
	var binds []string
	for i := 0; i < table.MaxBinds+1; i++ {
		binds = append(binds, `{"ip": "10.0.0.1", "proto": "tcp", "port": `+strconv.Itoa(i+1)+`}`)
	}
	in := cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [` + strings.Join(binds, ",") + `]` + goodBackends() + `}`)
	if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), "257 binds") {
		t.Fatalf("257 binds: %v", err)
	}
}

func TestHostBitsWarn(t *testing.T) {
	c, err := Parse([]byte(cfg(strings.Replace(tbl(goodBackends()), "10.0.0.1", "10.0.0.1/24", 1))))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "host bits") {
		t.Fatalf("warnings = %v", c.Warnings)
	}
}

func TestKeyNeverFormats(t *testing.T) {
	k := table.Key{1, 2, 3}
	for _, s := range []string{k.String(), k.GoString()} {
		if s != "<redacted>" {
			t.Fatalf("key formatted as %q", s)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/configs/*.json")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil && len(data) < 4096 {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"tables": [{"binds": [{"ip": "::/0", "port_start": 0, "port_end": 65535}]}]}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Whatever parses must build and serialise.
		tabs, err := table.BuildAll(c)
		if err != nil {
			t.Fatalf("accepted config does not build: %v", err)
		}
		var sb strings.Builder
		if err := table.WriteGLB(&sb, tabs); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSecretOfAnyTypeNeverEchoed: a hash_key or seed of the wrong JSON
// type is still a secret, and its value must not appear in the error.
func TestSecretOfAnyTypeNeverEchoed(t *testing.T) {
	for _, v := range []string{
		`12345678901234561234567890123456`, `1.2345678901234561e+31`, `-98765432109876`, `true`,
		`["abcdefabcdefabcdefabcdefabcdef12"]`, `{"k": "abcdefabcdefabcdefabcdefabcdef12"}`,
	} {
		for _, field := range []string{"hash_key", "seed"} {
			in := cfg(`{"hash_key": "` + testKey + `", "seed": "` + testSeed + `", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}]` + goodBackends() + `}`)
			old := testKey
			if field == "seed" {
				old = testSeed
			}
			in = strings.Replace(in, `"`+old+`"`, v, 1)
			_, err := Parse([]byte(in))
			if err == nil {
				t.Fatalf("%s %s accepted", field, v)
			}
			if !strings.Contains(err.Error(), "tables[0]."+field+": is ") {
				t.Errorf("%s %s: error %q does not name the field", field, v, err)
			}
			for _, part := range []string{"1234567890123456", "2345678901234561", "98765432109876", "true", "abcdefabcdef"} {
				if strings.Contains(err.Error(), part) {
					t.Errorf("%s %s: error %q echoes the value", field, v, err)
				}
			}
		}
	}
}

// TestHealthLeftToChecks: the file glb-healthcheck reads may leave a
// backend's health out (the checks decide) and carry a top-level
// "healthchecks" block; the one-shot commands' reader refuses it, saying
// where health comes from. GLB's packaged {"tables": []} is accepted.
func TestHealthLeftToChecks(t *testing.T) {
	in := `{"healthchecks": {"interval_ms": 500, "timeout_ms": 200, "trigger": 2, "fall": 4},
	  "tables": [` + tbl(`, "backends": [{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80}},
	                                {"ip": "10.1.0.2", "state": "active", "healthy": false}]`) + `]}`
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Tables[0].Backends
	if !c.Checked() || !b[0].Checked || b[0].Healthy || b[1].Checked || b[1].Healthy {
		t.Fatalf("backends %+v", b)
	}
	want := table.CheckSettings{Interval: 500 * time.Millisecond, Timeout: 200 * time.Millisecond, Rise: 2, Fall: 4}
	if c.Checks != want {
		t.Errorf("checks %+v, want %+v", c.Checks, want)
	}
	if d, _ := Parse([]byte(cfg(tbl(goodBackends())))); d.Checks != table.DefaultCheckSettings() || d.Checked() {
		t.Errorf("defaults: %+v", d.Checks)
	}
	_, err = ParseSource("f.json", []byte(in), table.ToolLimit)
	if err == nil || !strings.Contains(err.Error(), "f.json: tables[0].backends[0].healthy: missing: health is left to the checks") ||
		!strings.Contains(err.Error(), "director run") || !strings.Contains(err.Error(), "director healthcheck") {
		t.Errorf("one-shot reader: %v", err)
	}
	for bad, msg := range map[string]string{
		`{"interval_ms": 0}`:                      "healthchecks.interval_ms: 0 is not a whole number",
		`{"interval_ms": 100, "timeout_ms": 200}`: "healthchecks.timeout_ms: 200 ms is longer than interval_ms 100",
		`{"trigger": "3"}`:                        `healthchecks.trigger: "3" is not a whole number`,
		`{"retries": 3}`:                          "healthchecks.retries: unknown field",
	} {
		if _, err := Parse([]byte(`{"healthchecks": ` + bad + `, "tables": []}`)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", bad, err, msg)
		}
	}
	e, err := ParseSource("empty.json", []byte(`{"tables": []}`), table.ToolLimit)
	if err != nil || len(e.Tables) != 0 || len(e.Warnings) != 1 || !strings.Contains(e.Warnings[0], "passes every packet") {
		t.Errorf("empty tables: %v %+v", err, e)
	}
}

// TestFillHealth: the backends the checks decide get "healthy", the rest
// of the file is kept, and the result is a config the one-shot commands
// take, with the same tables as the input built with that health.
func TestFillHealth(t *testing.T) {
	in := `{"healthchecks": {"trigger": 2}, "tables": [{"name": "api", "hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}],
	  "backends": [{"ip": "10.1.0.1", "state": "active", "healthchecks": {"http": 80, "http_uri": "/up"}},
	               {"ip": "10.1.0.2", "state": "active", "healthy": false},
	               {"ip": "10.1.0.3", "state": "draining"}]}]}`
	out, err := FillHealth([]byte(in), func(i, j int) bool { return j == 0 })
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b := c.Tables[0].Backends
	if c.Checked() || !b[0].Healthy || b[1].Healthy || b[2].Healthy || c.Checks.Rise != 2 || *b[0].Healthchecks.HTTPURI != "/up" {
		t.Fatalf("filled: %+v\n%s", b, out)
	}
	if !strings.Contains(string(out), `"healthchecks": {`) || strings.Index(string(out), `"name"`) > strings.Index(string(out), `"hash_key"`) {
		t.Errorf("the file's content or order changed:\n%s", out)
	}
	if _, err := ParseSource("checked.json", out, table.ToolLimit); err != nil {
		t.Errorf("the one-shot commands refuse the filled file: %v", err)
	}
}

func TestBindOverlapAcrossTablesIsError(t *testing.T) {
	two := `{"tables": [` + tbl(goodBackends()) + `,` +
		strings.Replace(tbl(goodBackends()), `"port": 80`, `"port_start": 70, "port_end": 90`, 1) + `]}`
	_, err := Parse([]byte(two))
	if err == nil || !strings.Contains(err.Error(), "tables[1].binds[0]: tcp 10.0.0.1:70-90 overlaps tables[0].binds[0]") {
		t.Fatalf("overlap: %v", err)
	}
}

// TestBalanceFactor: the factor is kept in thousandths, exactly.
func TestBalanceFactor(t *testing.T) {
	for in, want := range map[string]uint16{"1": 1000, "1.0": 1000, "1.01": 1010, "1.234": 1234, "2": 2000, "2.000": 2000} {
		c, err := Parse([]byte(cfg(tbl(goodBackends() + `, "balance_factor": ` + in))))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := c.Tables[0].Balance; got != want {
			t.Errorf("balance_factor %s: %d, want %d", in, got, want)
		}
	}
}

// TestHistorySettings: history_s and history_hops as given, the defaults
// without them, and ramp_interval_s accepted with a warning that it is
// no longer used.
func TestHistorySettings(t *testing.T) {
	c, err := Parse([]byte(cfg(tbl(goodBackends() + `, "history_s": 30, "history_hops": false`))))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Tables[0].History; got != (table.HistorySettings{Window: 30 * time.Second, NoHops: true}) {
		t.Fatalf("history_s 30, history_hops false: %+v", got)
	}
	c, err = Parse([]byte(cfg(tbl(goodBackends() + `, "ramp_interval_s": 60`))))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Tables[0].History; got != table.DefaultHistory() || got.Window != 10*time.Minute || got.NoHops {
		t.Fatalf("no settings: %+v", got)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "tables[0].ramp_interval_s: no longer used") {
		t.Fatalf("warnings: %q", c.Warnings)
	}
}
