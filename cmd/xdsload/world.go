package main

import (
	"fmt"
	"strconv"
	"strings"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdsbridge/xdsbridge/sources"
)

// The synthetic fleet: service i is "svc-%05d" with endpoints
// 10.<i>>8>.<i&255>.<j+1>:80. A change number seq sets the port of the
// service's first endpoint to markerBase+seq, so a client that receives the
// service's ClusterLoadAssignment can tell which change it carries (a later
// change to the same service carries every earlier one).
const (
	markerBase = 1000
	maxChanges = 65535 - markerBase
)

func svcName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func svcIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "svc-"))
	if err != nil {
		return -1
	}
	return n
}

// service is service i at change marker (0: its initial state).
func service(i, endpoints, marker int) sources.Service {
	s := sources.Service{Name: svcName(i), Endpoints: make([]sources.Endpoint, 0, endpoints)}
	for j := range endpoints {
		port := uint32(80)
		if j == 0 && marker > 0 {
			port = uint32(markerBase + marker)
		}
		s.Endpoints = append(s.Endpoints, sources.Endpoint{
			Address: fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, j+1),
			Port:    port,
			Health:  sources.HealthHealthy,
		})
	}
	return s
}

// markerOf is the change number a ClusterLoadAssignment carries (0: none).
func markerOf(cla *endpoint.ClusterLoadAssignment) int32 {
	var m int32
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			p := int32(lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			if p >= markerBase && p-markerBase > m {
				m = p - markerBase
			}
		}
	}
	return m
}
