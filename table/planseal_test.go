package table

import (
	"bytes"
	"strings"
	"testing"
)

// TestPlanSeal: a sealed plan checks out with its key only, and any byte
// changed before the seal, the seal itself, or its removal, is refused.
func TestPlanSeal(t *testing.T) {
	t.Parallel()
	k := Sealer(bytes.Repeat([]byte{7}, 32))
	plain := []byte("{\n  \"plan_version\": 1,\n  \"config\": {\"tables\": []}\n}")
	sealed, err := k.SealPlanFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.CheckPlanFile(sealed); err != nil {
		t.Fatalf("the plan as sealed: %v", err)
	}
	if err := k.CheckPlanFile(bytes.TrimSuffix(sealed, []byte("\n"))); err != nil {
		t.Fatalf("the plan without its last newline: %v", err)
	}
	for i := range len(sealed) - 1 {
		edited := bytes.Clone(sealed)
		edited[i] ^= 0x01
		if k.CheckPlanFile(edited) == nil {
			t.Fatalf("byte %d (%q) changed, and the seal still checks out", i, sealed[i])
		}
	}
	if err := Sealer(bytes.Repeat([]byte{8}, 32)).CheckPlanFile(sealed); err == nil || !strings.Contains(err.Error(), "does not check out") {
		t.Errorf("another host's key: %v", err)
	}
	if err := k.CheckPlanFile(append(plain, '\n')); err == nil || !strings.Contains(err.Error(), "not sealed") {
		t.Errorf("an unsealed plan: %v", err)
	}
	if err := Sealer(nil).CheckPlanFile(sealed); err == nil || !strings.Contains(err.Error(), "no plan key") {
		t.Errorf("no key: %v", err)
	}
	if _, err := Sealer(nil).SealPlanFile(plain); err == nil {
		t.Error("sealed with no key")
	}
}
