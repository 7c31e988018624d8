package fileout_test

import (
	"fmt"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// clusterNames are the names of the clusters in a decoded clusters file
// (resp, err: decodeFile's result).
func clusterNames(resp *discovery.DiscoveryResponse, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	var names []string
	for _, a := range resp.Resources {
		m, err := a.UnmarshalNew()
		if err != nil {
			return names, err
		}
		c, ok := m.(*cluster.Cluster)
		if !ok {
			return names, fmt.Errorf("a %T in the clusters file", m)
		}
		names = append(names, c.Name)
	}
	return names, nil
}

// hasClusters reports whether b, the clusters file at path, holds exactly
// the n clusters publishClusters(n) serves, c000 to c(n-1), by their
// names as decoded: the file's text is no measure, as its version_info
// (hex) may spell a name ("...c002") that the file does not hold.
func hasClusters(path string, b []byte, n int) bool {
	names, err := clusterNames(decodeFile(path, b))
	if err != nil || len(names) != n {
		return false
	}
	for i, name := range names {
		if name != fmt.Sprintf("c%03d", i) {
			return false
		}
	}
	return true
}

// TestHasClustersReadsNamesNotText: the check TestNoPartialFile waits on
// takes a clusters file of c000 and c001 whose version_info ends in
// "c002" (a version a writer wrote, its content hash) for the 2 clusters
// it holds, in each format; a file of 3 clusters is not 2, nor 2 of 3.
func TestHasClustersReadsNamesNotText(t *testing.T) {
	file := func(format string, n int) (string, []byte) {
		resp := &discovery.DiscoveryResponse{TypeUrl: xds.ClusterType, VersionInfo: "cc1fb8c3a8f4c002"}
		for i := 0; i < n; i++ {
			a, err := anypb.New(translate.Cluster(fmt.Sprintf("c%03d", i)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Resources = append(resp.Resources, a)
		}
		var b []byte
		var err error
		if format == fileout.FormatProto {
			b, err = proto.Marshal(resp)
		} else if b, err = protojson.Marshal(resp); err == nil {
			b, err = yaml.JSONToYAML(b)
		}
		if err != nil {
			t.Fatal(err)
		}
		return "clusters" + fileout.Ext(format), b
	}
	for _, format := range []string{fileout.FormatYAML, fileout.FormatProto} {
		for _, c := range []struct{ held, want int }{{2, 2}, {3, 3}, {3, 2}, {2, 3}, {1, 2}} {
			path, b := file(format, c.held)
			if got := hasClusters(path, b, c.want); got != (c.held == c.want) {
				names, err := clusterNames(decodeFile(path, b))
				t.Errorf("%s: hasClusters(file of %d clusters %v (error %v), %d) = %v", format, c.held, names, err, c.want, got)
			}
		}
	}
}
