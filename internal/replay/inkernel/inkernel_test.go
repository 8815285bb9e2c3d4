//go:build linux

package inkernel

import (
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
)

// TestVerifyComparesVerdictReasonAndBytes: --verify's judgement of one
// packet needs the same XDP action, pass reason and bytes.
func TestVerifyComparesVerdictReasonAndBytes(t *testing.T) {
	frame := []byte("an unchanged frame")
	pass := model.Result{Verdict: model.XDPPass, Reason: abi.CPassMalformed, Out: frame}
	for _, c := range []struct {
		name   string
		kernel outcome
		model  model.Result
		want   string // "" when they agree
	}{
		{"same", outcome{verdict: model.XDPPass, reason: abi.CPassMalformed, out: frame}, pass, ""},
		{"aborted, bytes unchanged", outcome{verdict: 0, reason: -1, out: frame}, pass, "kernel XDP_ABORTED, model XDP_PASS pass_malformed"},
		{"dropped, bytes unchanged", outcome{verdict: 1, reason: -1, out: frame}, pass, "kernel XDP_DROP, model XDP_PASS pass_malformed"},
		{"another reason", outcome{verdict: model.XDPPass, reason: abi.CPassProto, out: frame}, pass, "kernel XDP_PASS pass_proto, model XDP_PASS pass_malformed"},
		{"no counter moved", outcome{verdict: model.XDPPass, reason: -1, out: frame}, pass, "kernel XDP_PASS (no counter), model XDP_PASS pass_malformed"},
		{"other bytes", outcome{verdict: model.XDPPass, reason: abi.CPassMalformed, out: []byte("x")}, pass, "XDP_PASS pass_malformed by both, different bytes"},
		{"tx", outcome{verdict: model.XDPTX, reason: -1, out: frame}, model.Result{Verdict: model.XDPTX, Out: frame}, ""},
		{"neither has a counter", outcome{verdict: model.XDPPass, reason: -1, out: frame}, model.Result{Verdict: model.XDPPass, Reason: 1 << 20, Out: frame}, ""},
		{"tx, another reason", outcome{verdict: model.XDPTX, reason: -1, out: frame}, model.Result{Verdict: model.XDPTX, Reason: abi.CPassProto, Out: frame}, ""},
		{"unknown actions", outcome{verdict: 7, reason: -1, out: frame}, model.Result{Verdict: 8, Out: frame}, "kernel XDP action 7, model XDP action 8"},
	} {
		desc, same := compare(&c.kernel, &c.model)
		if same != (c.want == "") || desc != c.want {
			t.Errorf("%s: %q (same %v), want %q", c.name, desc, same, c.want)
		}
	}
}
