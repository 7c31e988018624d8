package xds

import (
	"slices"

	"google.golang.org/grpc/codes"
)

// dropAnswered takes out of a state just installed the records of the
// responses its client has answered (ACK or NACK): answered is the last
// response of the type it answered, and every response sent before it was
// received before its answer. What a response is answered with is read
// when the answering request's watch is created, from that watch's own
// copy of the state; a record left in the state would be carried over by
// every later request that names no nonce (a subscription change), and
// the list would grow with each response of a client that changes its
// subscription between its ACKs, as Envoy does. Called by the stream
// handler right after install, before any watch reads the state (the
// list is the state's own: deltaPass.record copies it).
func (h *deltaHeld) dropAnswered(answered string) {
	if answered == "" || len(h.inflight) == 0 {
		return
	}
	h.inflight = slices.DeleteFunc(h.inflight, func(s *deltaSent) bool {
		return s.nonce == answered || nonceBefore(s.nonce, answered)
	})
}

// unanswered returns the max_unanswered_responses error if held, the state
// a delta response of typeURL installed (its answered records dropped),
// records more responses than the limit plus the names of subscribed, the
// names the stream subscribes to by name in the type, that the responses
// recorded carry (subscribedCarried); nil if not, or if the stream is not
// guarded. A client may subscribe to each name in a request of its own
// before it answers the responses to the first ones (Envoy's on-demand CDS
// does, for a burst of requests naming other clusters): each such name may
// be one response on its way, so the names it holds, bounded by the name
// limits, count on top of the limit, each once: a client that subscribes
// to the same name again and again without answering gets no more room
// for it.
func (a *streamAcct) unanswered(typeURL string, held *deltaHeld, subscribed map[string]struct{}) error {
	if a == nil || held == nil {
		return nil
	}
	limit, n := a.g.lim.MaxUnansweredResponses, len(held.inflight)
	if n <= limit {
		return nil
	}
	if names := subscribedCarried(held.inflight, subscribed); n > limit+names {
		return a.g.limitError(codes.ResourceExhausted, "max_unanswered_responses", limit,
			"the stream sent %d responses of %s that the client has not answered (ACK or NACK), more than the limit plus the %d names it subscribes to that they carry; answer them before sending more requests", n, typeURL, names)
	}
	return nil
}

// subscribedCarried counts the names of subscribed that the responses of
// inflight carry, each once, and at most one per response (its first
// name, sent or reported removed): one pass over the records, however
// many names each carries.
func subscribedCarried(inflight []*deltaSent, subscribed map[string]struct{}) int {
	seen := make(map[string]struct{}, min(len(inflight), len(subscribed)))
	for _, s := range inflight {
		var first string
		switch {
		case len(s.changed) > 0:
			first = s.changed[0]
		case len(s.removed) > 0:
			first = s.removed[0]
		default:
			continue
		}
		if _, ok := subscribed[first]; ok {
			seen[first] = struct{}{}
		}
	}
	return len(seen)
}
