package xds

// A delta stream's subscription to a type: adapted from go-control-plane
// v0.14.0's pkg/server/stream/v3/subscription.go (Copyright Envoyproxy
// Authors, Apache License 2.0); the names are a shared nameSet (nameset.go).

import "slices"

const explicitWildcard = "*"

// deltaSub is a delta stream's subscription to one type, and what its
// client holds. A copy is handed to each watch (as go-control-plane hands
// a copy of its struct), so a watch sees the names as of its request.
type deltaSub struct {
	// wildcard: the subscription holds the wildcard; allowLegacyWildcard:
	// no name was ever subscribed, so an empty request is a wildcard.
	wildcard, allowLegacyWildcard bool
	// names: subscribed by name (shared; never written). grewFrom: the
	// names before the last request, if it removed none of them (names
	// holds them all): an Envoy subscribes to its assignments a CDS part
	// at a time, and what was sent within the old names is within these
	// without looking (edssent.go).
	names, grewFrom *nameSet
	// held: the client's state as its type's last response installed it
	// (marked in place by unsubscriptions), or a first request's
	// initial_resource_versions.
	held *deltaHeld
	// answered: the nonce of the last response of the type the client
	// answered (ACK or NACK). The client received every response up to
	// it before it sent its later requests, which carry no nonce when
	// they only change the subscription.
	answered string
}

// newDeltaSub is the subscription of a type's first request on a stream:
// its names, and the client's initial versions (initial, and resumed: those
// the decoder found current; nil: none).
func newDeltaSub(subscribed, unsubscribed []string, initial map[string]string, resumed *resumedVersions) deltaSub {
	// Legacy wildcard mode is active for every type (go-control-plane's
	// default, which the server used).
	if initial == nil {
		initial = make(map[string]string)
	}
	s := deltaSub{wildcard: len(subscribed) == 0, allowLegacyWildcard: true, names: emptyNames, held: &deltaHeld{versions: initial, resumed: resumed}}
	if set := resumed.subscription(subscribed, unsubscribed); set != nil {
		// What update makes of a request that subscribes to names only.
		s.allowLegacyWildcard, s.names, s.grewFrom = false, set, emptyNames
		return s
	}
	s.update(subscribed, unsubscribed)
	return s
}

// update applies a request's subscriptions, then its unsubscriptions
// (go-control-plane's UpdateResourceSubscriptions), each name once: a name
// unsubscribed twice in one request is unsubscribed once.
func (s *deltaSub) update(subscribed, unsubscribed []string) {
	if s.allowLegacyWildcard {
		// Only a subscription ends the legacy wildcard.
		if len(subscribed) == 0 {
			return
		}
		s.allowLegacyWildcard = false
	}
	var remove []string
	add := subscribed // not copied unless it holds "*"
	if slices.Contains(subscribed, explicitWildcard) {
		s.wildcard = true
		add = slices.DeleteFunc(slices.Clone(subscribed), func(n string) bool { return n == explicitWildcard })
	}
	// Whether a name is subscribed as go-control-plane applies the
	// request to its map, one name after the other: the subscriptions,
	// then each unsubscription.
	var added, removed map[string]struct{}
	if len(unsubscribed) > 0 {
		s.held.explicit() // marked or forgotten name by name below
	}
	if len(unsubscribed) > 0 && len(add) > 0 {
		added = make(map[string]struct{}, len(add))
		for _, n := range add {
			added[n] = struct{}{}
		}
	}
	subscribedNow := func(n string) bool {
		if _, ok := removed[n]; ok {
			return false
		}
		_, ok := added[n]
		return ok || s.names.has(n)
	}
	for _, n := range unsubscribed {
		if n == explicitWildcard {
			s.wildcard = false
			continue
		}
		if _, again := removed[n]; again {
			// Its first unsubscription decided. Applied again, as
			// go-control-plane applies it, it would forget the version
			// the first marked: go-control-plane then sends the resource
			// as one its client does not hold, but a name a compact state
			// has no version of is held at the state's generation, and
			// the client (which may have dropped it) would not be answered.
			continue
		}
		// A name subscribed by name under a wildcard and unsubscribed is
		// answered again (sent, or reported removed): marked with an
		// empty version. Else it is forgotten, so that a subscription
		// again is answered even at the same version.
		if subscribedNow(n) && s.wildcard {
			if s.held.versions == nil {
				s.held.versions = map[string]string{}
			}
			s.held.versions[n] = ""
		} else {
			delete(s.held.versions, n)
		}
		if removed == nil {
			removed = map[string]struct{}{}
		}
		removed[n] = struct{}{}
		remove = append(remove, n)
	}
	old := s.names
	s.names = s.names.derive(add, remove)
	s.grewFrom = old
	for _, n := range remove {
		if old.has(n) {
			s.grewFrom = nil
			break
		}
	}
}

func (s deltaSub) SubscribedResources() map[string]struct{} { return s.names.m }
func (s deltaSub) IsWildcard() bool                         { return s.wildcard }
