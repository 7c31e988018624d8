// The floor: the least a server must do for the harness's clients, to
// measure, in the same run and with the same clients, what gRPC-go and
// the Go runtime cost per change and per client reached before any cache
// does anything (a lower bound for the bridge, not a control plane).
//
// Minimal by design: the clusters and assignments the harness's clients
// ask for (CDS and EDS, by service), each resource version translated
// (translate.Service) and encoded once (one proto.Marshal) when the change
// that made it is applied, and wrapped then, by hand, as the resources
// field of a delta response (a Resource) and of a sotw response (an Any).
// A response is those bytes as they are, handed to gRPC in pieces, plus a
// few bytes of type URL, nonce and version (floorCodec passes them
// through on this server only). Per stream and type it keeps the
// subscription, the nonce of the response in flight (one at most, as the
// bridge's streams) and the names changed since (pending): a change is
// sent at once to the streams that follow it and have nothing in flight,
// and to the others with the ACK of their response in flight, with
// whatever else changed meanwhile. ACKs are read without the protobuf
// runtime (floorDeltaACK, floorStream.sotwACK); other requests are
// unmarshalled. A stream has no goroutine of its own beyond gRPC's
// handler, which receives its requests and sends what an ACK calls for;
// the applier sends what a change calls for itself, without handing it
// to the stream's goroutine.
//
// What it does not do, as it is a measuring stick and no control plane:
// no limits, guards, authorization, keepalive, sync status or metrics
// beyond ServerStats; no removals (the harness removes no service); no
// responses split (the first EDS response of a delta client is every
// assignment, about 1.7 MB at 5,000 services: under gRPC's default 4 MiB
// receive limit, which the harness's clients raise anyway); NACKs are
// taken as ACKs; resumes (initial_resource_versions, a sotw request's
// version) are ignored: a resuming stream is sent everything it follows
// again; a delta stream's first request for a type without names is a
// wildcard subscription, a sotw one's too. The applier sends with the
// stream's lock held: a client that stops reading, once gRPC's window of
// the stream is full, stalls every change.

package load

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
)

// The floor's types, as indexes of its tables.
const (
	floorCDS = iota
	floorEDS
	floorTypes
)

var floorTypeURLs = [floorTypes]string{cdsType, edsType}

// Fields of the messages the floor writes: Any, Resource (delta),
// DeltaDiscoveryResponse and DiscoveryResponse.
const (
	anyTypeURL            protowire.Number = 1
	resourceVersion       protowire.Number = 1
	resourceResource      protowire.Number = 2
	resourceName          protowire.Number = 3
	deltaRespResources    protowire.Number = 2
	deltaRespTypeURL      protowire.Number = 4
	deltaRespNonce        protowire.Number = 5
	sotwRespVersion       protowire.Number = 1
	sotwRespResources     protowire.Number = 2
	sotwRespTypeURL       protowire.Number = 4
	sotwRespNonce         protowire.Number = 5
	sotwReqVersion        protowire.Number = 1
	sotwReqResourceNames  protowire.Number = 3
	sotwReqTypeURL        protowire.Number = 4
	sotwReqResponseNonce  protowire.Number = 5
	deltaReqTypeURL       protowire.Number = 2
	deltaReqResponseNonce protowire.Number = 6
)

// floor serves the services' clusters and assignments (floorRes, one per
// type and service, replaced by the applier) to its streams.
type floor struct {
	endpoints int
	names     []string       // by service
	index     map[string]int // service by name
	res       [floorTypes][]atomic.Pointer[floorRes]
	clusters  []*cluster.Cluster // the last translated, by service; owned by the applier

	gen     atomic.Uint64 // resource versions made
	encoded atomic.Uint64 // resources encoded (proto.Marshal)

	mu      sync.Mutex
	streams map[*floorStream]struct{}
}

// floorRes is one resource version, encoded: as a delta response's
// resources field (a Resource: version, Any, name) and as a sotw
// response's (the Any), tag and length included; each a piece of the
// responses that carry it, as they are. Value is the resource's encoding.
type floorRes struct {
	value       []byte
	delta, sotw mem.Buffer
}

func startFloor(ctx context.Context, lis net.Listener, services, endpoints int, done chan<- error) (*floor, error) {
	f := &floor{
		endpoints: endpoints, names: make([]string, services), index: make(map[string]int, services),
		clusters: make([]*cluster.Cluster, services), streams: map[*floorStream]struct{}{},
	}
	for t := range f.res {
		f.res[t] = make([]atomic.Pointer[floorRes], services)
	}
	for i := range services {
		f.names[i] = svcName(i)
		f.index[f.names[i]] = i
		r, _ := translate.Service(service(i, endpoints, 0))
		f.clusters[i] = r.Cluster
		f.res[floorCDS][i].Store(f.encode(floorCDS, i, f.marshal(r.Cluster)))
		f.res[floorEDS][i].Store(f.encode(floorEDS, i, f.marshal(r.Load)))
	}
	// The bridge's flow-control windows and buffer tiers (xds.Server.Run):
	// both serve the clients through the same transport settings.
	pool, err := mem.NewBinaryTieredBufferPool(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22)
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer(
		experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(floorCodec{protoenc.Name: encoding.GetCodecV2(protoenc.Name)}),
		grpc.MaxConcurrentStreams(1<<20),
		grpc.InitialWindowSize(256<<10),
		grpc.InitialConnWindowSize(1<<20),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, floorADS{f})
	runGRPC(ctx, gs, lis, done)
	return f, nil
}

// marshal is the one encoding of a resource (proto.Marshal), counted.
func (f *floor) marshal(m proto.Message) []byte {
	value, err := proto.Marshal(m)
	if err != nil {
		panic(err) // translate's resources always encode
	}
	f.encoded.Add(1)
	return value
}

// encode wraps value, the encoding of the resource of type t of service
// svc, as a new version.
func (f *floor) encode(t, svc int, value []byte) *floorRes {
	version := strconv.FormatUint(f.gen.Add(1), 10)
	typeURL := floorTypeURLs[t]
	a := protowire.AppendTag(nil, anyTypeURL, protowire.BytesType)
	a = protowire.AppendString(a, typeURL)
	a = protowire.AppendTag(a, anyValue, protowire.BytesType)
	a = protowire.AppendBytes(a, value)

	sotw := protowire.AppendTag(nil, sotwRespResources, protowire.BytesType)
	sotw = protowire.AppendBytes(sotw, a)

	res := protowire.AppendTag(nil, resourceVersion, protowire.BytesType)
	res = protowire.AppendString(res, version)
	res = protowire.AppendTag(res, resourceResource, protowire.BytesType)
	res = protowire.AppendBytes(res, a)
	res = protowire.AppendTag(res, resourceName, protowire.BytesType)
	res = protowire.AppendString(res, f.names[svc])
	delta := protowire.AppendTag(nil, deltaRespResources, protowire.BytesType)
	delta = protowire.AppendBytes(delta, res)
	return &floorRes{value: value, delta: mem.SliceBuffer(delta), sotw: mem.SliceBuffer(sotw)}
}

// apply translates the touched services again, makes a version of the
// resources that changed (the cluster compared with proto.Equal, as its
// encoding is not needed otherwise; the assignment by its encoding), and
// offers them to every stream: clusters before their assignments.
func (f *floor) apply(_ context.Context, touched, markers []int, _ int) error {
	var changed [floorTypes][]int
	for _, svc := range touched {
		r, _ := translate.Service(service(svc, f.endpoints, markers[svc]))
		if !proto.Equal(r.Cluster, f.clusters[svc]) {
			f.res[floorCDS][svc].Store(f.encode(floorCDS, svc, f.marshal(r.Cluster)))
			changed[floorCDS] = append(changed[floorCDS], svc)
		}
		f.clusters[svc] = r.Cluster
		if v := f.marshal(r.Load); !bytes.Equal(v, f.res[floorEDS][svc].Load().value) {
			f.res[floorEDS][svc].Store(f.encode(floorEDS, svc, v))
			changed[floorEDS] = append(changed[floorEDS], svc)
		}
	}
	f.mu.Lock()
	streams := make([]*floorStream, 0, len(f.streams))
	for s := range f.streams {
		streams = append(streams, s)
	}
	f.mu.Unlock()
	for _, s := range streams {
		s.changed(&changed)
	}
	return nil
}

func (f *floor) encodings() uint64 { return f.encoded.Load() }

func (f *floor) register(s *floorStream) {
	f.mu.Lock()
	f.streams[s] = struct{}{}
	f.mu.Unlock()
}

func (f *floor) unregister(s *floorStream) {
	f.mu.Lock()
	delete(f.streams, s)
	f.mu.Unlock()
}

// floorADS is the floor's ADS service: both variants, one handler
// goroutine per stream (gRPC's), which receives the requests and sends
// the responses they call for; the applier sends the responses changes
// call for.
type floorADS struct{ f *floor }

func (a floorADS) StreamAggregatedResources(st grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return a.f.serve(st, false)
}

func (a floorADS) DeltaAggregatedResources(st grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return a.f.serve(st, true)
}

// floorRequest receives a request's bytes as they are (floorCodec).
type floorRequest struct{ b []byte }

// floorCodec is the floor server's codec: a response is a mem.BufferSlice
// already encoded, sent as it is (its pieces are never written to
// afterwards); a floorRequest is given the request's bytes, copied into
// its buffer (gRPC reuses data's). Anything else is the proto codec's.
type floorCodec map[string]encoding.CodecV2

func (c floorCodec) Name() string { return protoenc.Name }

func (c floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(mem.BufferSlice); ok {
		return b, nil
	}
	return c[protoenc.Name].Marshal(v)
}

func (c floorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*floorRequest); ok {
		r.b = r.b[:0]
		for _, b := range data {
			r.b = append(r.b, b.ReadOnlyData()...)
		}
		return nil
	}
	return c[protoenc.Name].Unmarshal(data, v)
}
