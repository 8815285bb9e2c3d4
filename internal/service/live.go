package service

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/director/director/table"
)

// setLive records what the kernel holds.
func (s *service) setLive(tables []*table.Table, pts []table.PlanTable, dc *table.DirectorConfig) {
	s.live.tables = tables
	s.live.fps = make([]string, len(pts))
	for i, p := range pts {
		s.live.fps[i] = p.Fingerprint
	}
	if dc != nil {
		s.live.config = dc
	}
	s.exportLive(tables, s.live.fps)
}

// exported is a live table as its metrics were last exported.
type exported struct {
	t        *table.Table
	name, fp string
}

// exportLive exports the live tables: a table that changed has its series
// set anew and then its old ones that no longer hold deleted; one that did
// not is left alone. A scrape never finds a live backend missing (a reset
// and a new set left a gap at every apply), and an apply of one table of
// 32 touches that table's series alone.
func (s *service) exportLive(tables []*table.Table, fps []string) {
	prev := map[string]exported{}
	for _, e := range s.pub.exported {
		prev[e.name] = e
	}
	now := make([]exported, len(tables))
	for i, t := range tables {
		e := exported{t, table.DisplayName(t.Name, i), fps[i]}
		now[i] = e
		p, had := prev[e.name]
		delete(prev, e.name)
		if had && p.fp == e.fp && sameSeries(p.t, t) {
			continue
		}
		s.m.tableInfo.WithLabelValues(e.name, e.fp).Set(1)
		ips := make(map[netip.Addr]string, len(t.Backends))
		capped := map[netip.Addr]bool{}
		caps := table.Caps(t.Backends, t.Balance)
		prim := make([]int, len(t.Backends))
		for _, r := range t.Rows {
			prim[r.Primary]++
		}
		for i, b := range t.Backends {
			ip := b.IP.String()
			ips[b.IP] = b.Domain
			s.m.backendRows.WithLabelValues(e.name, ip).Set(float64(prim[i]))
			if caps != nil && b.Good() {
				capped[b.IP] = true
				s.m.backendCap.WithLabelValues(e.name, ip).Set(float64(caps[i]))
			}
			v := 0.0
			if b.Healthy {
				v = 1
			}
			s.m.backendHealthy.WithLabelValues(e.name, ip).Set(v)
			s.m.backendWeight.WithLabelValues(e.name, ip).Set(float64(b.W()))
			if b.Domain != "" {
				s.m.backendDomain.WithLabelValues(e.name, ip, b.Domain).Set(1)
			}
		}
		if !had {
			continue
		}
		if p.fp != e.fp {
			s.m.tableInfo.DeleteLabelValues(e.name, p.fp)
		}
		for _, b := range p.t.Backends {
			ip := b.IP.String()
			dom, still := ips[b.IP]
			if !still {
				s.m.backendHealthy.DeleteLabelValues(e.name, ip)
				s.m.backendWeight.DeleteLabelValues(e.name, ip)
				s.m.backendRows.DeleteLabelValues(e.name, ip)
			}
			if !capped[b.IP] {
				s.m.backendCap.DeleteLabelValues(e.name, ip)
			}
			if b.Domain != "" && (!still || dom != b.Domain) {
				s.m.backendDomain.DeleteLabelValues(e.name, ip, b.Domain)
			}
		}
	}
	// Tables no longer live.
	for name := range prev {
		for _, v := range []*prometheus.GaugeVec{s.m.tableInfo, s.m.backendHealthy, s.m.backendWeight, s.m.backendRows, s.m.backendCap, s.m.backendDomain} {
			v.DeletePartialMatch(prometheus.Labels{"table": name})
		}
	}
	s.pub.exported = now
}

// sameSeries reports whether two tables export the same backend series.
func sameSeries(a, b *table.Table) bool {
	if a == b {
		return true
	}
	if len(a.Backends) != len(b.Backends) || a.Balance != b.Balance {
		return false
	}
	for i, x := range a.Backends {
		y := b.Backends[i]
		if x.State != y.State || x.IP != y.IP || x.Healthy != y.Healthy || x.W() != y.W() || x.Domain != y.Domain ||
			x.ServerID != y.ServerID || x.MoreServerIDs != y.MoreServerIDs {
			return false
		}
	}
	return true
}

// liveTable is the live table a config's table i replaces.
func (s *service) liveTable(tc *table.TableConfig, i int) *table.Table {
	return table.Replaced(s.live.tables, tc, i)
}

// setHists records the live tables' histories and exports what they hold,
// by table.
func (s *service) setHists(hists []*table.History) {
	s.live.hists = hists
	s.m.historyRows.Reset()
	s.m.historyHopRows.Reset()
	for i, t := range s.live.tables {
		var h *table.History
		if i < len(hists) {
			h = hists[i]
		}
		rows, hopRows, _ := h.Summary()
		name := table.DisplayName(t.Name, i)
		s.m.historyRows.WithLabelValues(name).Set(float64(rows))
		s.m.historyHopRows.WithLabelValues(name).Set(float64(hopRows))
	}
}
