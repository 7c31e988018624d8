package xds_test

import "testing"

// modelCases are minimised histories of TestModel failures (the history
// part of a failure report, pasted), one per distinct violation the model
// found on the cache as it was when the model was written; each is fixed,
// and kept as a regression case. Each runs ten times: some depend on a
// request crossing a response. The seed is where it was found; "what" says
// what went wrong then.
var modelCases = []struct {
	name, seed, what, history string
}{
	{
		name: "nack/delta-good-resources-lost", seed: "1",
		what: "a NACKed response counts as held: s5, sent with the poison s3, is never sent again",
		history: `
		c0 delta CDS [s4 s5] EDS [s1 s2 s3 s5]
		before connecting: publish [eds:s3/4☠ eds:s5/6]`,
	},
	{
		name: "nack/sotw-good-resources-lost", seed: "3",
		what: "a NACKed sotw response counts as held: s1, sent with the poison s3, is never sent again",
		history: `
		c0 sotw  CDS [*] EDS [*]
		before connecting: publish [eds:s1/1 eds:s3/6☠]`,
	},
	{
		name: "resubscribe/deleted-held-name-never-removed-cds", seed: "40",
		what: "s5, held through the wildcard, re-subscribed by name as it is deleted: never reported removed",
		history: `
		c0 delta CDS *(legacy) EDS [s1 s3 s5 s9]
		1 publish [cds:s5/1]
		2 c0 subscribe CDS [s5 s7 s9]   (then at once:)
		3 publish [del:s5 cds:s9/2]`,
	},
	{
		name: "resubscribe/deleted-held-name-never-removed-eds", seed: "1024",
		what: "s0, held, re-subscribed as it is deleted: never reported removed (or, by timing, s6 resent at the version held)",
		history: `
		c0 delta CDS *(legacy) EDS *(legacy)
		before connecting: publish [eds:s0/4 eds:s3/2]
		1 c0 subscribe EDS [s0 s3 s4]   (then at once:)
		2 publish [del:s0 eds:s6/7]`,
	},
	{
		name: "sotw/wildcard-added-across-a-response", seed: "413",
		what: "* added to a named sotw subscription while a response is on its way (the request is dropped for its stale nonce, the ACK carries *): s4 is never sent",
		history: `
		c0 sotw  CDS [*] EDS [s2]
		before connecting: publish [eds:s2/3]
		1 publish [cds:s2/2 eds:s4/5]   (then at once:)
		2 c0 subscribe EDS *`,
	},
	{
		name: "order/delta-eds-before-its-cluster", seed: "16",
		what: "cluster s3 waits for the ACK of a CDS response, its re-versioned assignment does not",
		history: `
		c0 delta CDS [*] EDS [s0 s1 s2 s3]
		before connecting: publish [eds:s3/7]
		1 publish [cds:s4/0]   (then at once:)
		2 publish [cds:s3/0]`,
	},
	{
		name: "order/sotw-eds-before-its-cluster", seed: "31",
		what: "cluster s6 waits for the ACK of a CDS response, its assignment does not",
		history: `
		c0 sotw  CDS *(legacy) EDS [s3 s5 s6]
		1 publish [cds:s7/0]   (then at once:)
		2 publish [cds:s6/0 eds:s6/7]`,
	},
	{
		name: "resend/star-unsubscribe", seed: "17",
		what: "unsubscribing * (here never subscribed) makes the cache check everything wholesale: s2 is resent at the version held",
		history: `
		c0 delta CDS [s3 s5] EDS [s2 s7]
		before connecting: publish [eds:s2/0]
		1 c0 unsubscribe EDS *`,
	},
	{
		name: "nack/rejected-version-resent-on-star-unsubscribe", seed: "2004956",
		what: "each (phantom) * unsubscribe resends the poison s2 the client rejected: a NACK loop",
		history: `
		c0 delta CDS [s0] EDS [s2]
		before connecting: publish [eds:s2/1☠]
		1 c0 unsubscribe EDS *
		2 c0 unsubscribe EDS *`,
	},
	{
		name: "resend/deleted-and-recreated-while-behind", seed: "14",
		what: "s5 deleted and created again with the same version while a response is unacknowledged: resent at the version held",
		history: `
		c0 delta CDS *(legacy) EDS [s0 s3]
		1 publish [cds:s5/0]   (then at once:)
		2 publish [del:s5]   (then at once:)
		3 publish [cds:s5/0]`,
	},
	{
		name: "resend/request-crossing-a-response", seed: "493",
		what: "a subscription change processed while the previous watch's response is queued (not yet installed) is answered from the state before it: s4 resent at the version held",
		history: `
		c0 delta CDS [s1 s2 s5] EDS [s4]
		1 c0 subscribe EDS [s2 s3 s5]   (then at once:)
		2 publish [cds:s3/2 eds:s3/2 eds:s4/0]`,
	},
	{
		name: "removed/never-sent-rest-of-split-response", seed: "47",
		what: "s3, in the unsent rest of a split response, deleted: reported removed though never sent",
		history: `
		names s0..s9, delta responses of at most 73 B, poison false
		c0 delta CDS *(legacy) EDS [*]
		1 publish [eds:s0/1 eds:s3/6]   (then at once:)
		2 publish [del:s3]`,
	},
	{
		name: "removed/created-and-deleted-while-behind", seed: "670",
		what: "s3 created and deleted while a response is unacknowledged: reported removed though never sent",
		history: `
		c0 delta CDS [*] EDS none
		1 publish [cds:s0/1]   (then at once:)
		2 publish [cds:s3/0]   (then at once:)
		3 publish [del:s3]`,
	},
	{
		name: "removed/star-subscribe", seed: "90",
		what: "subscribing * checks wholesale: s5, deleted before and never held, is reported removed",
		history: `
		c0 delta CDS [s0 s2 s6 s7] EDS [s1]
		before connecting: publish [cds:s5/0]
		1 publish [cds:s2/0 del:s5]
		2 c0 subscribe CDS *`,
	},
	{
		name: "visibility/hidden-change-after-an-ack-of-nothing", seed: "4",
		what: "the ACK of a response left nothing to look at but the rest, and that held for the names of the commit that woke the watch: s5, hidden and subscribed, reported removed when it changed",
		history: `
		names s0..s6, delta responses of at most 32 KiB, poison true
		c0 delta CDS [s0] EDS [s0 s2 s3 s5] sees s[0-3]
		1 publish [eds:s5/6]`,
	},
	{
		name: "visibility/hidden-change-in-the-rest-of-a-split-response", seed: "121",
		what: "a split response kept hidden names changed since the client's generation in its rest: s5 reported removed to a wildcard client that may not see it",
		history: `
		names s0..s5, delta responses of at most 126 B, poison false
		c0 delta CDS [*] EDS [*] sees s[0-3]
		1 publish [eds:s0/5 eds:s1/2 eds:s3/6 eds:s5/1]`,
	},
	{
		name: "order/assignment-for-a-cluster-let-go-in-the-window", seed: "226266157",
		what: "model: the client drops cluster s7 (unsubscribes the wildcard) and takes it again; the assignment the server sent while it was not wanted (after the cluster) arrives before the cluster is sent again",
		history: `
		names s0..s7, delta responses of at most 32 KiB, poison true
		c0 delta CDS *(legacy) EDS [s3] sees s[13579]
		before connecting: publish [cds:s7/2 eds:s7/1]
		1 c0 subscribe CDS *
		2 c0 subscribe EDS *   (then at once:)
		3 c0 unsubscribe CDS *   (then at once:)
		4 c0 subscribe CDS [s2 s3 s7]`,
	},
	{
		name: "order/assignment-for-a-cluster-unsubscribed-in-the-window", seed: "263135598",
		what: "model: cluster s3 unsubscribed, its assignment changes (sent: the cluster is not wanted), s3 subscribed again before the assignment arrives",
		history: `
		names s0..s5, delta responses of at most 32 KiB, poison false
		c0 delta CDS [s3] EDS [s0 s2 s3 s4]
		1 publish [cds:s3/1]
		2 c0 unsubscribe CDS [s1 s3]   (then at once:)
		3 publish [eds:s3/6]   (then at once:)
		4 c0 subscribe CDS [s1 s3 s5]`,
	},
	{
		name: "removed/came-and-went-while-the-removal-was-on-its-way", seed: "263137269",
		what: "model: s5 reported removed (computed at its deletion), then created and deleted again before that response arrived: the server, as of that response, reports it removed again",
		history: `
		names s0..s5, delta responses of at most 32 KiB, poison false
		c0 delta CDS [s2 s3 s5] EDS [s1 s5]
		1 publish [eds:s5/1]
		2 publish [del:s5]   (then at once:)
		3 publish [eds:s5/1]   (then at once:)
		4 publish [del:s5]   (then at once:)
		5 publish [cds:s3/0]`,
	},
	{
		name: "removed/came-and-went-while-the-removal-was-on-its-way-cds", seed: "200417581",
		what: "model: as removed/came-and-went-while-the-removal-was-on-its-way, of a cluster",
		history: `
		names s0..s6, delta responses of at most 32 KiB, poison false
		c0 delta CDS [s0 s6] EDS [s6]
		before connecting: publish [cds:s0/2]
		1 publish [del:s0]   (then at once:)
		2 publish [cds:s0/0]   (then at once:)
		3 publish [del:s0]   (then at once:)
		4 publish [del:s3]`,
	},
	{
		name: "removed/came-and-went-after-a-nack", seed: "263134881",
		what: "model: like the above, after a NACK of s4's poison version",
		history: `
		names s0..s7, delta responses of at most 32 KiB, poison true
		c0 delta CDS *(legacy) EDS [s4 s6 s7]
		1 publish [eds:s4/1☠]
		2 publish [del:s4]   (then at once:)
		3 publish [eds:s4/0]   (then at once:)
		4 publish [del:s4]   (then at once:)
		5 publish [del:s0]`,
	},
	{
		name: "removed/came-and-went-then-subscribed", seed: "263142475",
		what: "model: s4 created and deleted in the window, then subscribed: the answer to the subscription reports it removed after the removal already on its way",
		history: `
		names s0..s5, delta responses of at most 32 KiB, poison true
		c0 delta CDS *(legacy) EDS [s0 s1 s3]
		1 publish [cds:s4/0]   (then at once:)
		2 publish [del:s4]   (then at once:)
		3 c0 unsubscribe CDS [s3]   (then at once:)
		4 publish [cds:s0/1]   (then at once:)
		5 c0 subscribe CDS [s0 s1 s4]`,
	},
	{
		name: "removed/came-and-went-after-a-nack-with-wildcard", seed: "200424508",
		what: "model: s4, in a NACKed response, deleted: reported removed after the NACK and again after the ACK that follows",
		history: `
		names s0..s9, delta responses of at most 32 KiB, poison true
		c0 delta CDS [*] EDS [*]
		1 publish [eds:s4/5 eds:s5/2☠]   (then at once:)
		2 c0 subscribe EDS *   (then at once:)
		3 publish [del:s4]   (then at once:)
		4 publish [eds:s3/1]`,
	},
	{
		name: "resend/phantom-unsubscribe-under-wildcard-while-behind", seed: "1857",
		what: "s2, held through the wildcard only, unsubscribed (a phantom) while the previous CDS response is queued: resent at the version held (and s3, which does not exist, reported removed)",
		history: `
		names s0..s6, delta responses of at most 148 B, poison false
		c0 delta CDS *(legacy) EDS [s1 s3 s5 s6]
		c1 delta CDS [*] EDS none sees s[0-3]
		c2 delta CDS [s2] EDS [*]
		1 publish [cds:s2/0]
		2 c2 unsubscribe CDS [s2]
		3 publish [eds:s2/0]
		4 c0 unsubscribe EDS [s1]
		5 publish [cds:s1/2 cds:s4/0 eds:s4/3]
		6 c2 subscribe CDS *
		7 c2 unsubscribe CDS [s2 s3]   (then at once:)
		8 publish [cds:s1/0 eds:s3/1]`,
	},
	{
		name: "nack/rejected-version-owed-to-each-subscription", seed: "226262026",
		what: "model: s0, subscribed twice before its poison version arrives, is sent (and rejected) once of itself and once in answer to each subscription: the protocol requires those answers, they are no NACK loop",
		history: `
		names s0..s6, delta responses of at most 32 KiB, poison true
		c0 delta CDS *(legacy) EDS *(legacy)
		1 c0 subscribe EDS [s0 s3 s6]   (then at once:)
		2 c0 subscribe EDS [s0 s1]   (then at once:)
		3 publish [eds:s0/5☠]`,
	},
	{
		name: "visibility/hidden-name-subscribed-twice-told-once", seed: "657347908",
		what: "model: hidden s8, subscribed by two requests before an answer, is reported removed in one response computed after both (with s5 and s6 of the second; again after that response is NACKed): one answer answers both requests",
		history: `
		names s0..s8, delta responses of at most 331 B, poison true
		c0 delta CDS [*] EDS [s2 s6] sees s[0-3]
		before connecting: publish [eds:s2/4☠]
		1 publish [eds:s1/1☠]
		2 c0 subscribe EDS [s1 s2 s8]   (then at once:)
		3 c0 subscribe EDS [s5 s6 s8]`,
	},
	{
		name: "nack/rejected-version-that-came-back", seed: "924942013",
		what: "s2's cluster went d8e3cb → 7190a8 → d8e3cb while its assignment's poison version 787e83 was on its way: re-versioned back to 787e83 at a later generation, it was not remembered as rejected on the NACK, and sent again",
		history: `
		names s0..s5, delta responses of at most 32 KiB, poison true
		c0 delta CDS *(legacy) EDS [s2]
		before connecting: publish [cds:s2/1 eds:s2/1]
		1 publish [cds:s2/2 eds:s2/1☠]   (then at once:)
		2 publish [cds:s2/0]   (then at once:)
		3 publish [cds:s2/2]   (then at once:)
		4 c0 unsubscribe EDS [s3 s5]`,
	},
	{
		name: "reanswer/unsubscribed-twice-under-wildcard", seed: "243",
		what: "s6, subscribed by name under the wildcard, unsubscribed twice in one request: the second unsubscription forgot that the first asked to answer it again; the client, which let it go, never gets it back",
		history: `
		c0 delta CDS *(legacy) EDS [s6]
		before connecting: publish [cds:s6/1 eds:s6/3]
		1 c0 subscribe EDS *
		2 c0 change EDS sub=[] unsub=[s6 s6]`,
	},
	{
		name: "resend/phantom-unsubscribe-under-wildcard-in-the-rest", seed: "569627378",
		what: "s8, held through the wildcard only, unsubscribed (a phantom) as a publish comes: the response to both is split, s8 is left to the rest with the names changed, and the rest resends it at the version held",
		history: `
		names s0..s8, delta responses of at most 377 B, poison false
		c0 delta CDS [*] EDS none
		1 publish [eds:s8/7]
		2 publish [eds:s2/1]
		3 c0 subscribe EDS *
		4 c0 unsubscribe EDS [s2 s8]   (then at once:)
		5 publish [eds:s1/5 eds:s3/6 eds:s6/2]`,
	},
	{
		name: "removed/unsubscribed-in-flight-then-wildcard", seed: "479292273",
		what: "s7, carried by a response in flight, unsubscribed and deleted, then * subscribed before that response arrives: the client keeps s7, never reported removed",
		history: `
		c0 delta CDS *(legacy) EDS [s0 s4 s5 s6 s7]
		1 publish [eds:s7/2]
		2 publish [eds:s7/4]   (then at once:)
		3 publish [del:s7]   (then at once:)
		4 c0 unsubscribe EDS [s7]   (then at once:)
		5 publish [eds:s3/1]   (then at once:)
		6 c0 subscribe EDS *`,
	},
	{
		name: "removed/unsubscribed-in-flight-deleted-before-the-state-then-wildcard",
		what: "s7, carried by a response in flight, unsubscribed, deleted, and the state's generation moved past the deletion by a response of s3, then * subscribed before either arrives: the answer reports s7 removed (the change log since the state does not name it)",
		history: `
		c0 delta CDS *(legacy) EDS [s3 s7]
		1 publish [cds:s3/0 eds:s3/1 cds:s7/0 eds:s7/1]
		2 publish [eds:s7/2]   (then at once:)
		3 c0 unsubscribe EDS [s7]   (then at once:)
		4 publish [del:s7]   (then at once:)
		5 publish [eds:s3/2]   (then at once:)
		6 c0 subscribe EDS *`,
	},
	{
		name: "held/unsubscribed-in-flight-changed-then-wildcard",
		what: "s7, carried by a response in flight, unsubscribed and changed, then * subscribed before that response arrives: the answer sends s7's new version (the one on its way is older)",
		history: `
		c0 delta CDS *(legacy) EDS [s3 s7]
		1 publish [cds:s3/0 eds:s3/1 cds:s7/0 eds:s7/1]
		2 publish [eds:s7/2]   (then at once:)
		3 c0 unsubscribe EDS [s7]   (then at once:)
		4 publish [eds:s7/3]   (then at once:)
		5 publish [eds:s3/2]   (then at once:)
		6 c0 subscribe EDS *`,
	},
	{
		name: "held/removal-in-flight-of-an-existing-name-then-wildcard",
		what: "s3, subscribed by name under a wildcard, unsubscribed with * in one request: the answer reports s3 removed; * subscribed again before it arrives: the answer to * sends s3 (the client drops it on that removal)",
		history: `
		c0 delta CDS *(legacy) EDS [*]
		1 publish [cds:s3/0 eds:s3/1 cds:s5/0 eds:s5/1]
		2 c0 subscribe EDS [s3]
		3 c0 change EDS sub=[] unsub=[s3 *]   (then at once:)
		4 c0 subscribe EDS *`,
	},
	{
		name: "removed/wildcard-dropped-and-taken-again-with-a-response-on-its-way",
		what: "s5, sent through * in a response still on its way, * dropped, s5 deleted, * taken again: the client keeps what that response carries, and is told s5 is removed",
		history: `
		c0 delta CDS *(legacy) EDS [s3]
		1 publish [cds:s3/0 eds:s3/1 cds:s5/0 eds:s5/1]
		2 c0 subscribe EDS *
		3 publish [eds:s5/2]   (then at once:)
		4 c0 unsubscribe EDS *   (then at once:)
		5 publish [del:s5]   (then at once:)
		6 c0 subscribe EDS *`,
	},
}

// TestModelCases replays the recorded failures of TestModel.
func TestModelCases(t *testing.T) {
	setupModelTLS(t)
	for _, mc := range modelCases {
		t.Run(mc.name, func(t *testing.T) {
			h, err := parseHistory(mc.history)
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				f, err := runHistory(h)
				if err != nil {
					t.Fatal(err)
				}
				if f != nil {
					t.Fatalf("%s (found with seed %s)\n%s", mc.what, mc.seed, f.report(0))
				}
			}
		})
	}
}
