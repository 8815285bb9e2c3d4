package service

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/director/director/internal/service/health"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
)

// metrics are what director run exports at /metrics. The datapath's and
// the interfaces' counters are read from the kernel at each scrape (a
// Collector), so they are exactly what 'director stats' reads; the rest is
// the service's own state.
type metrics struct {
	reg *prometheus.Registry

	backendHealthy *prometheus.GaugeVec   // table, backend: the health applied
	backendWeight  *prometheus.GaugeVec   // table, backend: the weight applied
	backendRows    *prometheus.GaugeVec   // table, backend: its primary rows
	backendCap     *prometheus.GaugeVec   // table, backend: its cap under a balance factor
	backendDomain  *prometheus.GaugeVec   // table, backend, domain: 1, where a domain is given
	checkUp        *prometheus.GaugeVec   // backend, check: the last result
	checkLatency   *prometheus.GaugeVec   // backend, check
	checkFailures  *prometheus.CounterVec // backend, check, reason
	checksSkipped  *prometheus.CounterVec // reason
	tableInfo      *prometheus.GaugeVec   // table, fingerprint
	applies        *prometheus.CounterVec // result
	applyDuration  prometheus.Histogram
	lastApply      prometheus.Gauge
	held           prometheus.Gauge
	// historyOverflow counts rows changes applied put at risk for want
	// of room in their hops.
	historyOverflow prometheus.Counter
	// historyRows and historyHopRows are, by table, the rows that remember
	// an earlier primary and those whose packets list one.
	historyRows, historyHopRows *prometheus.GaugeVec
	failStatic                  *prometheus.GaugeVec // table
	configErrors                prometheus.Counter
	attached                    *prometheus.GaugeVec // interface, mode
	vipsAnnounced               prometheus.Gauge
	// bgpPeers reports the BGP sessions at each scrape (nil: none).
	bgpPeers func() []status.Peer
}

// newMetrics makes the service's metrics; stats reads the datapath's
// counters (loader.Director.Stats) at each scrape.
func newMetrics(stats func() (*loader.Stats, error)) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.backendHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_backend_healthy",
		Help: "1 when the backend is healthy in the live table, 0 when not (the checks' dampened state, or the operator's)."}, []string{"table", "backend"})
	m.backendWeight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_backend_weight",
		Help: "The backend's weight in the live table (1 where none was given)."}, []string{"table", "backend"})
	m.backendRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_backend_primary_rows",
		Help: "The rows of the live table whose primary the backend is (of 65,536)."}, []string{"table", "backend"})
	m.backendCap = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_backend_balance_cap_rows",
		Help: "The most rows the backend may be primary for under the table's balance factor; only for tables with one, and backends that may be primary. At its cap when director_backend_primary_rows equals it."}, []string{"table", "backend"})
	m.backendDomain = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_backend_domain_info",
		Help: "1 for each backend of a live table with a failure domain, labelled with it."}, []string{"table", "backend", "domain"})
	m.checkUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_check_up",
		Help: "1 when the backend's last check of this kind passed, 0 when it failed."}, []string{"backend", "check"})
	m.checkLatency = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_check_latency_seconds",
		Help: "How long the backend's last check of this kind took."}, []string{"backend", "check"})
	m.checkFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "director_check_failures_total",
		Help: "Failed checks, by backend, kind and reason."}, []string{"backend", "check", "reason"})
	m.checksSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "director_checks_skipped_total",
		Help: "Checks the director could not make for want of its own resources (descriptors, buffers, memory, local ports), by reason: they change no backend's health."}, []string{"reason"})
	m.tableInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_table_info",
		Help: "1 for each live table, with its fingerprint: directors that agree have equal fingerprints."}, []string{"table", "fingerprint"})
	m.applies = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "director_applies_total",
		Help: "Changes the service planned, by result: applied, held (unsafe, or fail-static), failed."}, []string{"result"})
	m.applyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "director_apply_duration_seconds",
		Help: "How long an apply took, from the plan to the tables read back.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.lastApply = prometheus.NewGauge(prometheus.GaugeOpts{Name: "director_last_apply_success_timestamp_seconds",
		Help: "When the last change was applied, or a start found the tables as they should be (Unix time)."})
	m.held = prometheus.NewGauge(prometheus.GaugeOpts{Name: "director_held_changes",
		Help: "1 while an unsafe config change waits for an operator's 'director apply --allow-unsafe'."})
	m.historyOverflow = prometheus.NewCounter(prometheus.CounterOpts{Name: "director_history_overflow_rows_total",
		Help: "Rows applied changes put at risk because they had more earlier primaries than their hops hold."})
	m.historyRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_history_rows",
		Help: "Rows of a live table that remember an earlier primary (within history_s)."}, []string{"table"})
	m.historyHopRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_history_hop_rows",
		Help: "Rows of a live table whose packets list an earlier primary after the secondary."}, []string{"table"})
	m.failStatic = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_fail_static",
		Help: "1 while a table's health changes are held because too many backends would go down at once."}, []string{"table"})
	m.configErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "director_config_errors_total",
		Help: "Config files the service could not read or use (it keeps the last good one)."})
	m.attached = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "director_interface_attached",
		Help: "1 for each interface the program is attached to, with its XDP mode."}, []string{"interface", "mode"})
	m.vipsAnnounced = prometheus.NewGauge(prometheus.GaugeOpts{Name: "director_bgp_vips_announced",
		Help: "VIPs this director announces over BGP."})
	for _, c := range []prometheus.Collector{m.backendHealthy, m.backendWeight, m.backendRows, m.backendCap, m.backendDomain, m.checkUp, m.checkLatency, m.checkFailures, m.checksSkipped, m.tableInfo, m.applies,
		m.applyDuration, m.lastApply, m.held, m.historyOverflow, m.historyRows, m.historyHopRows, m.failStatic, m.configErrors, m.attached, m.vipsAnnounced} {
		f(c)
	}
	f(&datapathCollector{stats: stats})
	f(&bgpCollector{m: m})
	return m
}

// observe exports a round of a backend's check results. A backend is
// checked once for every table it is in, so these carry no table.
func (m *metrics) observe(ip netip.Addr, rs []health.Result) {
	b := ip.String()
	for _, r := range rs {
		up := 0.0
		if r.OK {
			up = 1
		} else {
			m.checkFailures.WithLabelValues(b, r.Kind, r.Reason).Inc()
		}
		m.checkUp.WithLabelValues(b, r.Kind).Set(up)
		m.checkLatency.WithLabelValues(b, r.Kind).Set(r.Latency.Seconds())
	}
}

// forgetTarget drops a backend no config checks any more.
func (m *metrics) forgetTarget(t *target) {
	for _, k := range t.checks.Kinds() {
		m.checkUp.DeleteLabelValues(t.ip.String(), k)
		m.checkLatency.DeleteLabelValues(t.ip.String(), k)
		m.checkFailures.DeletePartialMatch(prometheus.Labels{"backend": t.ip.String(), "check": k})
	}
}

// datapathCollector reads the datapath's counters and the attached
// interfaces' at each scrape.
type datapathCollector struct {
	stats func() (*loader.Stats, error)
}

var (
	descProcessed = prometheus.NewDesc("director_packets_processed_total", "Packets the program saw.", nil, nil)
	descMatched   = prometheus.NewDesc("director_packets_matched_total", "Packets for a bind whose table was found.", nil, nil)
	descEncap     = prometheus.NewDesc("director_packets_encapsulated_total", "Packets encapsulated and sent (XDP_TX).", nil, nil)
	descEncapB    = prometheus.NewDesc("director_encapsulated_bytes_total", "Bytes of the encapsulated packets sent.", nil, nil)
	descFast      = prometheus.NewDesc("director_bind_fast_total", "Packets whose bind the exact-match table found.", nil, nil)
	descGroup     = prometheus.NewDesc("director_bind_group_total", "Packets whose bind the group table found (prefix binds, port ranges).", nil, nil)
	descPassed    = prometheus.NewDesc("director_packets_passed_total", "Packets passed to the stack, by reason.", []string{"reason"}, nil)
	descQUIC      = prometheus.NewDesc("director_quic_packets_total",
		"UDP packets of tables with QUIC-LB routing: routed by connection ID, or sent by the row and why (fallback_...).", []string{"result"}, nil)
	descQUICICMP = prometheus.NewDesc("director_quic_icmp_routed_total",
		"ICMP errors sent to the server that the connection ID of the QUIC packet they quote names (of director_quic_packets_total{result=\"routed\"}).", nil, nil)
	descQUICTable = prometheus.NewDesc("director_quic_table_packets_total",
		"A QUIC-LB table's UDP packets by the config rotation their connection ID carries (none: no ID read), routed or fallback_..., as director_quic_packets_total.",
		[]string{"table", "config", "result"}, nil)
	descErrors    = prometheus.NewDesc("director_packet_errors_total", "Packets passed because of a setup or kernel problem, by reason.", []string{"reason"}, nil)
	descBackendP  = prometheus.NewDesc("director_backend_packets_total", "Packets sent to the backend as primary.", []string{"table", "backend"}, nil)
	descBackendB  = prometheus.NewDesc("director_backend_bytes_total", "Bytes (of the original IP packets) sent to the backend as primary.", []string{"table", "backend"}, nil)
	descIfPackets = prometheus.NewDesc("director_interface_packets_total", "Packets the attached interface received or sent.", []string{"interface", "direction"}, nil)
	descIfDropped = prometheus.NewDesc("director_interface_dropped_total", "Packets the attached interface dropped (tx: what the program sent that did not leave).", []string{"interface", "direction"}, nil)
	descIfErrors  = prometheus.NewDesc("director_interface_errors_total", "The attached interface's errors.", []string{"interface", "direction"}, nil)
)

func (c *datapathCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProcessed, descMatched, descEncap, descEncapB, descFast, descGroup, descPassed, descErrors, descQUIC,
		descQUICICMP, descQUICTable, descBackendP, descBackendB, descIfPackets, descIfDropped, descIfErrors} {
		ch <- d
	}
}

func (c *datapathCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descProcessed, err)
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g := st.Global
	counter(descProcessed, g["processed"])
	counter(descMatched, g["matched"])
	counter(descEncap, g["encapsulated"])
	counter(descEncapB, g["encapsulated_bytes"])
	counter(descFast, g["bind_fast"])
	counter(descGroup, g["bind_group"])
	for _, n := range loader.CounterNames() {
		switch {
		case strings.HasPrefix(n, "pass_"):
			counter(descPassed, g[n], strings.TrimPrefix(n, "pass_"))
		case strings.HasPrefix(n, "error_"):
			counter(descErrors, g[n], strings.TrimPrefix(n, "error_"))
		case n == "quic_icmp_routed": // of quic_routed: its own metric, so that the results add up
			counter(descQUICICMP, g[n])
		case strings.HasPrefix(n, "quic_"):
			counter(descQUIC, g[n], strings.TrimPrefix(n, "quic_"))
		}
	}
	for _, t := range st.Tables {
		for _, b := range t.Backends {
			counter(descBackendP, b.Packets, t.Name, b.IP)
			counter(descBackendB, b.Bytes, t.Name, b.IP)
		}
		for _, q := range t.QUIC {
			config := "none"
			if q.ConfigID != nil {
				config = fmt.Sprint(*q.ConfigID)
			}
			for n, v := range q.Counters {
				if n != "quic_icmp_routed" { // of routed: the results add up
					counter(descQUICTable, v, t.Name, config, strings.TrimPrefix(n, "quic_"))
				}
			}
		}
	}
	for _, i := range st.Interfaces {
		counter(descIfPackets, i.RxPackets, i.Interface, "rx")
		counter(descIfPackets, i.TxPackets, i.Interface, "tx")
		counter(descIfDropped, i.RxDropped, i.Interface, "rx")
		counter(descIfDropped, i.TxDropped, i.Interface, "tx")
		counter(descIfErrors, i.RxErrors, i.Interface, "rx")
		counter(descIfErrors, i.TxErrors, i.Interface, "tx")
	}
}

// bgpCollector reports the BGP sessions at each scrape.
type bgpCollector struct{ m *metrics }

var (
	descSession = prometheus.NewDesc("director_bgp_session_established", "1 when the BGP session to the peer is established.", []string{"peer"}, nil)
	descFlaps   = prometheus.NewDesc("director_bgp_session_flaps_total", "Times the session to the peer left the established state.", []string{"peer"}, nil)
	descAdv     = prometheus.NewDesc("director_bgp_advertised_prefixes", "Prefixes announced to the peer.", []string{"peer"}, nil)
)

func (c *bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSession
	ch <- descFlaps
	ch <- descAdv
}

func (c *bgpCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.bgpPeers == nil {
		return
	}
	for _, p := range c.m.bgpPeers() {
		up := 0.0
		if p.Established {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descSession, prometheus.GaugeValue, up, p.Address)
		ch <- prometheus.MustNewConstMetric(descFlaps, prometheus.CounterValue, float64(p.Flaps), p.Address)
		ch <- prometheus.MustNewConstMetric(descAdv, prometheus.GaugeValue, float64(p.Advertised), p.Address)
	}
}
