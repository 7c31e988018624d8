package xds

import (
	"strings"
	"time"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// What the server keeps and logs of a client's requests: its node, and
// each NACK, counted, logged at a bounded rate, with the client's strings
// cut to a bound.

// request records the node and, for a NACK, logs and counts it.
func (s *Server) request(delta bool, id int64, node *core.Node, typeURL, nonce string, errDetail interface{ GetMessage() string }, hasErr bool) {
	if !hasErr && node.GetId() == "" {
		return // nothing to record (an ACK: no node, no error)
	}
	s.mu.Lock()
	ci, ok := s.clients[streamKey{delta, id}]
	if ok {
		s.noteNode(ci, node)
	}
	if !hasErr {
		s.mu.Unlock()
		return
	}
	nonce, _ = bound(nonce, "", MaxClientStringBytes)
	label := servedType(typeURL)
	if typeURL == "" && ok && ci.TypeURL != "ads" {
		// A stream of one type (DeltaEndpoints, StreamClusters...): a
		// request without a type URL is of the stream's type.
		label = ci.TypeURL
	}
	var nodeID string
	now := time.Now()
	logIt, suppressed := true, 0
	if ok {
		// A request repeating the nonce it NACKs (Envoy does, when it
		// changes its subscription after a NACK) is the same NACK.
		if ci.nackNonces[label] == nonce {
			s.mu.Unlock()
			s.m.nackLogsSuppressed.WithLabelValues("repeated").Inc()
			return
		}
		if ci.nackNonces == nil || len(ci.nackNonces) >= 16 {
			ci.nackNonces = map[string]string{}
		}
		ci.nackNonces[label] = nonce
		nodeID = ci.Node
		logIt, suppressed = ci.nackLog.allow(now)
	}
	// And the server-wide limit, whatever the streams: a client opening
	// stream after stream gets each a fresh per-stream allowance.
	reason, serverSuppressed := "rate", 0
	if logIt {
		if logIt, serverSuppressed = s.nackLogAll.allow(now); !logIt {
			reason = "server_rate"
			if ok {
				ci.nackLog.unallow(suppressed)
			}
		}
	}
	s.nackTotal++
	msg, cut := bound(errDetail.GetMessage(), "", MaxNACKMessageBytes)
	if cut {
		s.m.truncated.WithLabelValues("nack_message").Inc()
	}
	if ok {
		ci.NACKs++
		ci.LastNACK = msg
	}
	s.mu.Unlock()
	s.m.nacks.WithLabelValues(label, modeName(delta)).Inc()
	if !logIt {
		s.m.nackLogsSuppressed.WithLabelValues(reason).Inc()
		return
	}
	t, cut := bound(typeURL, "", MaxClientStringBytes)
	if cut {
		s.m.truncated.WithLabelValues("type_url").Inc()
	}
	args := []any{"node", nodeID, "mode", modeName(delta), "type", t, "nonce", nonce, "error", msg}
	if suppressed > 0 {
		args = append(args, "nacks_not_logged", suppressed)
	}
	if serverSuppressed > 0 {
		args = append(args, "nacks_not_logged_server_wide", serverSuppressed)
	}
	s.log.Warn("xDS client rejected an update (NACK); it keeps its previous config and the same content is not sent again", args...)
}

// noteNode records the node a client's request names, cut to
// MaxClientStringBytes. Called under s.mu.
func (s *Server) noteNode(ci *clientInfo, node *core.Node) {
	if node == nil || node.GetId() == "" {
		return
	}
	var cut bool
	ci.Node, cut = bound(node.GetId(), ci.Node, MaxClientStringBytes)
	if cut {
		s.m.truncated.WithLabelValues("node_id").Inc()
	}
	ci.Cluster, cut = bound(node.GetCluster(), ci.Cluster, MaxClientStringBytes)
	if cut {
		s.m.truncated.WithLabelValues("node_cluster").Inc()
	}
}

// logLimiter lets perMinute lines through in each minute from the first,
// and counts the others.
type logLimiter struct {
	perMinute  int
	start      time.Time
	n          int
	suppressed int
}

// allow reports whether a line may be logged now, and if so how many were
// not since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	if l.start.IsZero() || now.Sub(l.start) >= time.Minute {
		l.start, l.n = now, 0
	}
	if l.n >= l.perMinute {
		l.suppressed++
		return false, 0
	}
	l.n++
	sup := l.suppressed
	l.suppressed = 0
	return true, sup
}

// unallow undoes allow's yes (which reported sup): the line was not
// logged after all.
func (l *logLimiter) unallow(sup int) {
	l.n--
	l.suppressed += sup + 1
}

// NACKLogsServerFactor × nack_logs_per_minute NACKs are logged per minute
// over every stream.
const NACKLogsServerFactor = 10

// MaxClientStringBytes bounds what a client's request can make the server
// store and echo (/debug/clients, logs): a node id or cluster longer than
// this is kept as its first MaxClientStringBytes bytes (cut at a UTF-8
// boundary) followed by "…".
const MaxClientStringBytes = 256

// MaxNACKMessageBytes bounds a NACK's error message as stored (last_nack in
// /debug/clients) and logged, the same way.
const MaxNACKMessageBytes = 1024

// bound returns v cut to MaxClientStringBytes, and whether it was cut. A
// value equal to the one stored (prev) is returned as stored, so a client
// repeating its long id on every request is counted once per stream and
// stores no new string.
func bound(v, prev string, limit int) (string, bool) {
	if len(v) <= limit {
		return v, false
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	b := v[:cut] + "…"
	if b == prev {
		return prev, false
	}
	// A copy: the stored string must not keep the request's buffer alive.
	return strings.Clone(b), true
}
