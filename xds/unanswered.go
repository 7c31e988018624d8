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
// records more responses than the limit plus subscribed, the names the
// stream subscribes to by name in the type; nil if not, or if the stream
// is not guarded. A client may subscribe to each name in a request of its
// own before it answers the responses to the first ones (Envoy's
// on-demand CDS does, for a burst of requests naming other clusters):
// each such name may be one response on its way, so the names it holds,
// bounded by the name limits, count on top of the limit.
func (a *streamAcct) unanswered(typeURL string, held *deltaHeld, subscribed int) error {
	if a == nil || held == nil {
		return nil
	}
	limit := a.g.lim.MaxUnansweredResponses
	if n := len(held.inflight); n > limit+subscribed {
		return a.g.limitError(codes.ResourceExhausted, "max_unanswered_responses", limit,
			"the stream sent %d responses of %s that the client has not answered (ACK or NACK), more than the limit plus the %d names it subscribes to; answer them before sending more requests", n, typeURL, subscribed)
	}
	return nil
}
