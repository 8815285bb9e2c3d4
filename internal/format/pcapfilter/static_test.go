//go:build nolibpcap

package pcapfilter

import (
	"errors"
	"strings"
	"testing"
)

// TestStaticRefuses: the static build refuses every expression, saying
// why and what still selects packets.
func TestStaticRefuses(t *testing.T) {
	_, err := Compile("tcp port 80", 65535)
	if !errors.Is(err, ErrNoLibpcap) || !strings.Contains(err.Error(), "static build") || !strings.Contains(err.Error(), "--table") {
		t.Fatalf("Compile in the static build: %v", err)
	}
}
