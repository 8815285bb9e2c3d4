package bpf

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// DirectorCounterNames are the datapath's global counters, by index: the
// names of enum dir_counter in director.h, lower-cased, without DIR_C_
// (DIR_C_PASS_NO_BIND is pass_no_bind). They are read from the embedded
// object's BTF, so the C enum is their only definition.
func DirectorCounterNames() []string { return directorCounters() }

// BackendCounterNames are the backend program's counters, by index: enum
// be_counter in backend.c, lower-cased, without BE_C_.
func BackendCounterNames() []string { return backendCounters() }

var (
	directorCounters = sync.OnceValue(func() []string { return enumNames(LoadDirector, "dir_counter", "DIR_C_", "DIR_C_MAX") })
	backendCounters  = sync.OnceValue(func() []string { return enumNames(LoadBackend, "be_counter", "BE_C_", "BE_C_MAX") })
)

// enumNames lists an enum's members in value order, lower-cased, without
// prefix, up to (not including) the member named end. The object is
// embedded: a failure here is a build that cannot work at all.
func enumNames(load func() (*ebpf.CollectionSpec, error), name, prefix, end string) []string {
	spec, err := load()
	if err != nil {
		panic(fmt.Sprintf("bpf: reading the embedded object: %v", err))
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName(name, &e); err != nil {
		panic(fmt.Sprintf("bpf: enum %s: %v", name, err))
	}
	var out []string
	for _, v := range e.Values {
		if v.Name == end {
			break
		}
		if int(v.Value) != len(out) {
			panic(fmt.Sprintf("bpf: enum %s: %s is %d, not %d", name, v.Name, v.Value, len(out)))
		}
		out = append(out, strings.ToLower(strings.TrimPrefix(v.Name, prefix)))
	}
	return out
}
