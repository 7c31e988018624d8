// The simulated clients: Envoy-like delta ADS and grpc-go-like sotw ADS
// streams, each recording when it received and ACKed every change.

package load

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

const (
	cdsType = resource.ClusterType
	edsType = resource.EndpointType
)

// fleet is what the clients share: the service names and a decode cache
// (every client receives the same encodings, so each is decoded once).
type fleet struct {
	services int
	names    []string
	orders   [resumeOrders][]int // of the services in a request's map entries (mapOrders)
	resumes  resumeBodies

	mu      sync.RWMutex
	decoded map[string]decodedCLA

	// The versions the clients hold, by service (versionTable).
	cdsVersions, edsVersions versionTable
	// The last assignment decoded, by service: every client receives the
	// same encodings.
	lastCLA []atomic.Pointer[claDecoding]
}

type claDecoding struct {
	b string
	d decodedCLA
}

type decodedCLA struct {
	svc    int32
	marker int32
}

func newFleet(services int) *fleet {
	f := &fleet{services: services, names: make([]string, services), orders: mapOrders(services), decoded: map[string]decodedCLA{},
		cdsVersions: make(versionTable, services), edsVersions: make(versionTable, services), lastCLA: make([]atomic.Pointer[claDecoding], services)}
	for i := range services {
		f.names[i] = svcName(i)
	}
	return f
}

// decodeAt decodes b, the assignment of service svc as its name says.
func (f *fleet) decodeAt(svc int, b []byte) decodedCLA {
	if svc < 0 || svc >= len(f.lastCLA) {
		return f.decode(b)
	}
	if p := f.lastCLA[svc].Load(); p != nil && p.b == string(b) {
		return p.d
	}
	d := f.decode(b)
	f.lastCLA[svc].Store(&claDecoding{b: string(b), d: d})
	return d
}

func (f *fleet) decode(b []byte) decodedCLA {
	f.mu.RLock()
	d, ok := f.decoded[string(b)]
	f.mu.RUnlock()
	if ok {
		return d
	}
	var cla endpoint.ClusterLoadAssignment
	d = decodedCLA{svc: -1}
	if err := proto.Unmarshal(b, &cla); err == nil {
		d = decodedCLA{svc: int32(svcIndex(cla.GetClusterName())), marker: markerOf(&cla)}
	}
	f.mu.Lock()
	f.decoded[string(b)] = d
	f.mu.Unlock()
	return d
}

// obs is a client's observation of a change marker: it received a service's
// assignment carrying marker (svc -1: a baseline snapshot version, which
// carries every change up to marker) at recv and ACKed it at ack (unix ns).
type obs struct {
	svc, marker int32
	recv, ack   int64
}

// client is one simulated xDS client on its own ADS stream.
//
// Delta clients behave like Envoy: wildcard CDS, then a delta EDS
// subscription for the clusters learned, every response ACKed; on
// reconnect they send their known versions (initial_resource_versions).
//
// SotW clients behave like grpc-go: CDS and EDS for the clusters they use
// (subset; nil = every cluster, CDS wildcard), every response ACKed with its
// version and nonce; on reconnect they send their last versions.
type client struct {
	id     int
	delta  bool
	node   string
	conn   *grpc.ClientConn
	fl     *fleet
	subset []int  // sotw: the services used; nil = all
	wants  []bool // services this client follows

	mu        sync.Mutex
	cdsVer    []string
	cdsHave   []bool
	nClusters int
	edsVer    []string
	edsHave   []bool
	edsSub    []bool
	nEDS      int
	markers   []int32
	global    int32
	obs       []obs
	sotwCDS   string
	sotwEDS   string
	streamErr error

	bytes     atomic.Int64
	responses atomic.Int64
	ready     atomic.Bool // has the whole initial state
	up        atomic.Bool // current stream sent its first requests
	// resynced: when (unix ns) a resumed stream had ACKed an answer of
	// each type its first requests asked for; 0 until then.
	resynced atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}
}

func newClient(id int, delta bool, conn *grpc.ClientConn, fl *fleet, subset []int) *client {
	n := fl.services
	c := &client{
		id: id, delta: delta, node: nodeID(id), conn: conn, fl: fl, subset: subset,
		cdsVer: make([]string, n), cdsHave: make([]bool, n),
		edsVer: make([]string, n), edsHave: make([]bool, n), edsSub: make([]bool, n),
		markers: make([]int32, n), global: -1,
	}
	c.wants = make([]bool, n)
	if subset == nil {
		for i := range c.wants {
			c.wants[i] = true
		}
	} else {
		for _, s := range subset {
			c.wants[s] = true
		}
	}
	return c
}

func (c *client) expected() int {
	if c.subset == nil {
		return c.fl.services
	}
	return len(c.subset)
}

// start opens a stream; resume sends the known versions.
func (c *client) start(resume bool) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.done = make(chan struct{})
	c.up.Store(false)
	c.resynced.Store(0)
	go func() {
		defer close(c.done)
		var err error
		if c.delta {
			err = c.runDelta(ctx, resume)
		} else {
			err = c.runSotw(ctx, resume)
		}
		if ctx.Err() == nil && err != nil {
			c.mu.Lock()
			c.streamErr = err
			c.mu.Unlock()
		}
	}()
}

// resync follows a resumed stream's first answers: the types asked for
// and not yet answered.
type resync struct {
	c        *client
	cds, eds bool
}

// answered notes an answer of typeURL, ACKed; the client is resynced
// once every type asked for was answered.
func (r *resync) answered(typeURL string) {
	switch {
	case typeURL == cdsType && r.cds:
		r.cds = false
	case typeURL == edsType && r.eds:
		r.eds = false
	default:
		return
	}
	if !r.cds && !r.eds {
		r.c.resynced.Store(time.Now().UnixNano())
	}
}

// stop closes the stream and waits for its goroutine.
func (c *client) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func (c *client) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErr
}

func (c *client) checkReady() {
	if c.nClusters >= c.expected() && c.nEDS >= c.expected() {
		c.ready.Store(true)
	}
}

func (c *client) namesOf(idx []int) []string {
	out := make([]string, len(idx))
	for i, s := range idx {
		out[i] = c.fl.names[s]
	}
	return out
}

func (c *client) runDelta(ctx context.Context, resume bool) error {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx, grpc.ForceCodecV2(newRawCodec()))
	if err != nil {
		return err
	}
	node := &core.Node{Id: c.node, Cluster: "xdsload"}
	rs := resync{c: c}
	if !resume {
		if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType}); err != nil {
			return err
		}
	} else {
		first, edsResume, err := c.resumeRequests(node)
		if err != nil {
			return err
		}
		if err := st.SendMsg(first); err != nil {
			return err
		}
		rs.cds, rs.eds = true, edsResume != nil
		if edsResume != nil {
			if err := st.SendMsg(edsResume); err != nil {
				return err
			}
		}
	}
	c.up.Store(true)
	var raw rawResponse
	var r deltaResponse
	for n := 0; ; n++ {
		if err := st.RecvMsg(&raw); err != nil {
			return err
		}
		recv := time.Now().UnixNano()
		if err := r.read(raw.b, c.fl); err != nil {
			return err
		}
		if n%checkEvery == 0 {
			if err := r.check(); err != nil {
				return err
			}
		}
		c.bytes.Add(int64(len(raw.b)))
		c.responses.Add(1)
		switch string(r.typeURL) {
		case cdsType:
			var sub, unsub []int
			c.mu.Lock()
			for _, res := range r.resources {
				i := res.svc
				if i < 0 || i >= len(c.cdsHave) {
					continue
				}
				if !c.cdsHave[i] {
					c.cdsHave[i] = true
					c.nClusters++
				}
				c.cdsVer[i] = res.version
				if !c.edsSub[i] {
					c.edsSub[i] = true
					sub = append(sub, i)
				}
			}
			for _, n := range r.removed {
				i := svcIndexOf(n)
				if i < 0 || i >= len(c.cdsHave) || !c.cdsHave[i] {
					continue
				}
				c.cdsHave[i] = false
				c.nClusters--
				if c.edsSub[i] {
					c.edsSub[i] = false
					unsub = append(unsub, i)
				}
			}
			c.checkReady()
			c.mu.Unlock()
			// (gRPC writes a request's bytes after SendMsg returns: one
			// buffer each.)
			if err := st.SendMsg(rawRequest{appendACK(nil, cdsType, r.nonce)}); err != nil {
				return err
			}
			rs.answered(cdsType)
			if len(sub) > 0 || len(unsub) > 0 {
				if err := st.Send(&discovery.DeltaDiscoveryRequest{
					TypeUrl: edsType, ResourceNamesSubscribe: c.namesOf(sub), ResourceNamesUnsubscribe: c.namesOf(unsub),
				}); err != nil {
					return err
				}
			}
		case edsType:
			got := make([]decodedCLA, 0, len(r.resources))
			for _, res := range r.resources {
				got = append(got, c.fl.decodeAt(res.svc, res.value))
			}
			c.mu.Lock()
			for k, res := range r.resources {
				i := int(got[k].svc)
				if i < 0 || i >= len(c.edsHave) {
					continue
				}
				if !c.edsHave[i] {
					c.edsHave[i] = true
					c.nEDS++
				}
				c.edsVer[i] = res.version
			}
			for _, n := range r.removed {
				if i := svcIndexOf(n); i >= 0 && i < len(c.edsHave) && c.edsHave[i] {
					c.edsHave[i] = false
					c.nEDS--
				}
			}
			c.mu.Unlock()
			if err := st.SendMsg(rawRequest{appendACK(nil, edsType, r.nonce)}); err != nil {
				return err
			}
			rs.answered(edsType)
			c.record(got, recv, time.Now().UnixNano())
		}
		r.release()
		raw.b = nil
	}
}

// resumeRequests are a delta client's first requests on a new stream: CDS
// with the versions it holds, and EDS (nil if it follows no assignment)
// with its subscription and the versions it holds. Their bodies are the
// fleet's, shared by the clients holding the same (resumeBodies), with
// the entries in the order of the client's id.
func (c *client) resumeRequests(node *core.Node) (cds, eds rawRequest, err error) {
	nf, err := nodeField(node)
	if err != nil {
		return nil, nil, err
	}
	k := c.id % resumeOrders
	c.mu.Lock()
	defer c.mu.Unlock()
	cds = rawRequest{nf, c.fl.resumes.body(c.fl, cdsType, heldState{have: c.cdsHave, vers: c.cdsVer}, k)}
	held := make([]bool, len(c.edsSub))
	subscribed := false
	for i, s := range c.edsSub {
		held[i] = s && c.edsHave[i]
		subscribed = subscribed || s
	}
	if !subscribed {
		return cds, nil, nil
	}
	return cds, rawRequest{c.fl.resumes.body(c.fl, edsType, heldState{subs: c.edsSub, have: held, vers: c.edsVer}, k)}, nil
}

// record notes the markers received, once the response is ACKed.
func (c *client) record(got []decodedCLA, recv, ack int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range got {
		if d.svc < 0 || int(d.svc) >= len(c.markers) {
			continue
		}
		if d.marker > c.markers[d.svc] {
			c.markers[d.svc] = d.marker
			c.obs = append(c.obs, obs{svc: d.svc, marker: d.marker, recv: recv, ack: ack})
		}
	}
	c.checkReady()
}

func (c *client) runSotw(ctx context.Context, resume bool) error {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &core.Node{Id: c.node, Cluster: "xdsload"}
	var cdsNames, edsNames []string
	if c.subset != nil {
		cdsNames = c.namesOf(c.subset)
		edsNames = cdsNames
	} else {
		edsNames = c.fl.names
	}
	c.mu.Lock()
	cdsVer, edsVer := "", ""
	if resume {
		cdsVer, edsVer = c.sotwCDS, c.sotwEDS
	}
	c.mu.Unlock()
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: cdsType, ResourceNames: cdsNames, VersionInfo: cdsVer}); err != nil {
		return err
	}
	edsAsked := false
	rs := resync{c: c, cds: resume, eds: resume}
	if resume {
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, ResourceNames: edsNames, VersionInfo: edsVer}); err != nil {
			return err
		}
		edsAsked = true
	}
	c.up.Store(true)
	for {
		r, err := st.Recv()
		if err != nil {
			return err
		}
		recv := time.Now().UnixNano()
		c.bytes.Add(int64(proto.Size(r)))
		c.responses.Add(1)
		switch r.GetTypeUrl() {
		case cdsType:
			c.mu.Lock()
			c.sotwCDS = r.GetVersionInfo()
			// A sotw CDS response is the full set.
			if n := len(r.GetResources()); n != c.nClusters {
				c.nClusters = n
			}
			c.checkReady()
			c.mu.Unlock()
			if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: cdsType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: cdsNames}); err != nil {
				return err
			}
			rs.answered(cdsType)
			if !edsAsked {
				edsAsked = true
				if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, ResourceNames: edsNames}); err != nil {
					return err
				}
			}
		case edsType:
			v := r.GetVersionInfo()
			var got []decodedCLA
			var snapshot int64 = -1
			if rest, ok := strings.CutPrefix(v, "s"); ok {
				// The baseline's snapshot version is the last change it
				// holds: no need to decode thousands of assignments.
				snapshot, _ = strconv.ParseInt(rest, 10, 32)
			} else {
				for _, res := range r.GetResources() {
					got = append(got, c.fl.decode(res.GetValue()))
				}
			}
			c.mu.Lock()
			c.sotwEDS = v
			if snapshot >= 0 {
				if n := len(r.GetResources()); n > c.nEDS {
					c.nEDS = n
				}
			} else {
				for _, d := range got {
					if i := int(d.svc); i >= 0 && i < len(c.edsHave) && !c.edsHave[i] {
						c.edsHave[i] = true
						c.nEDS++
					}
				}
			}
			c.mu.Unlock()
			if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, VersionInfo: v, ResponseNonce: r.GetNonce(), ResourceNames: edsNames}); err != nil {
				return err
			}
			rs.answered(edsType)
			ack := time.Now().UnixNano()
			if snapshot >= 0 {
				c.mu.Lock()
				if int32(snapshot) > c.global {
					c.global = int32(snapshot)
					c.obs = append(c.obs, obs{svc: -1, marker: c.global, recv: recv, ack: ack})
				}
				c.checkReady()
				c.mu.Unlock()
			} else {
				c.record(got, recv, ack)
			}
		}
	}
}

// holds reports whether the client holds change seq of service svc (or a
// later one).
func (c *client) holdsLocked(svc int, seq int32) bool {
	return c.markers[svc] >= seq || c.global >= seq
}

// convergedTo reports whether the client holds the final change of every
// service it follows among those changed.
func (c *client) convergedTo(final []int32, changed []int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range changed {
		if c.wants[s] && !c.holdsLocked(s, final[s]) {
			return false
		}
	}
	return true
}

// observations returns a copy of what the client observed, in order.
func (c *client) observations() []obs {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]obs(nil), c.obs...)
}
