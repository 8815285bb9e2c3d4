package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// cidLookup is show --lookup of a QUIC connection ID in one table: the
// server ID it carries, the counter its packets are counted under
// (quic_routed, or the fallback's) and, where routed, the backend.
type cidLookup struct {
	Table        string `json:"table"`
	Index        int    `json:"index"`
	ConnectionID string `json:"connection_id"`
	ServerID     string `json:"server_id,omitempty"`
	Counter      string `json:"counter"`
	Backend      string `json:"backend,omitempty"`
	// NotServing is the backend that has the server ID but is not
	// serving, for quic_fallback_unknown_id.
	NotServing string `json:"not_serving,omitempty"`
}

// connectionID reads show --lookup's argument as a QUIC connection ID: hex
// digits (an optional 0x before them), 1 to 20 bytes.
func connectionID(s string) ([]byte, bool) {
	b, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(s), "0x"))
	if err != nil || len(b) == 0 || len(b) > table.MaxCIDLen {
		return nil, false
	}
	return b, true
}

// lookupCID is show --lookup of a connection ID: in each table with QUIC-LB
// routing (whose UDP bind matches --to, if given), the backend a packet
// carrying it goes to, or why it follows its row. It asks the model with a
// long header carrying the ID, which gives the ID's length; a short header
// takes the length from the table, and reads the same bytes.
func lookupCID(tables []*table.Table, cid []byte, to string) ([]cidLookup, error) {
	pkt := append([]byte{0xc0, 0, 0, 0, 1, byte(len(cid))}, cid...)
	pkt = append(pkt, make([]byte, 1+table.MaxCIDLen)...) // what follows: the reads past the ID find bytes
	var out []cidLookup
	names := loader.CounterNames()
	for i, t := range tables {
		if !t.QUIC.On() {
			continue
		}
		if to != "" {
			vip, port, hasPort, err := parseHostPort(to)
			if err != nil {
				return nil, fmt.Errorf("--to: %w", err)
			}
			if !bindsMatch(t, vip, port, hasPort, table.ProtoUDP) {
				continue
			}
		}
		l := cidLookup{Table: table.DisplayName(t.Name, i), Index: i, ConnectionID: hex.EncodeToString(cid)}
		sid, ci, named := model.QUICServerID(t.QUIC, cid)
		if named {
			l.ServerID = sid.String()
		}
		c, b := model.QUICRoute(t, pkt)
		l.Counter = names[c]
		if b >= 0 {
			l.Backend = t.Backends[b].IP.String()
		}
		for _, be := range t.Backends {
			if c == model.QUICUnknownID && named && sid == be.ServerIDIn(ci) {
				l.NotServing = fmt.Sprintf("%s (%s, %s)", be.IP, be.State, healthWord(be.Healthy))
			}
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		if to != "" {
			return nil, fmt.Errorf("--lookup: no table with a quic block has a udp bind matching %s", to)
		}
		return nil, fmt.Errorf("--lookup: no table has a quic block: a connection ID names no backend")
	}
	return out, nil
}

// cidFallback says, for each fallback counter, why a packet follows its
// row.
var cidFallback = map[int]string{
	model.QUICCIDLen:      "the ID is shorter than a server ID needs",
	model.QUICUnroutable:  "config rotation 0b111 marks it as not to be routed by",
	model.QUICOtherConfig: "its config rotation bits are another config's",
	model.QUICUnknownID:   "no backend of the table that is serving (active, filling or draining, and healthy) has that server ID",
}

func printCIDLookup(w io.Writer, l cidLookup) {
	if l.Backend != "" {
		fmt.Fprintf(w, "lookup connection ID %s in %s: server ID %s, sent to %s (%s)\n", l.ConnectionID, l.Table, l.ServerID, l.Backend, l.Counter)
		return
	}
	why := cidFallback[counterIndex(l.Counter)]
	if l.NotServing != "" {
		why = "the backend with that server ID, " + l.NotServing + ", is not serving: only active, filling or draining backends that are healthy are"
	}
	fmt.Fprintf(w, "lookup connection ID %s in %s: follows its row (%s): %s\n", l.ConnectionID, l.Table, l.Counter, why)
}

// counterIndex is the index of the datapath counter called name, -1 for
// none.
func counterIndex(name string) int {
	for i, n := range loader.CounterNames() {
		if n == name {
			return i
		}
	}
	return -1
}
