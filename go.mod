module github.com/director/director

go 1.26.8

require github.com/dchest/siphash v1.2.3

require (
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/vishvananda/netns v0.0.5
)

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.73.1 // indirect
	golang.org/x/net v0.61.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
