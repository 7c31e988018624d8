package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/xdsbridge/xdsbridge/xds"
)

// statusFlags are the flags of `xdsbridge status`.
type statusFlags struct {
	admin, node, tokenFile, caFile, certFile, keyFile *string
	timeout                                           *time.Duration
}

func (f *statusFlags) define(fs *flag.FlagSet) {
	f.defineConn(fs, 10*time.Second)
	f.node = fs.String("node", "", "show this client (node id): its streams, each type's versions, and every resource with the version it holds")
	f.tokenFile = fs.String("token-file", "", "file holding the admin bearer token (default: admin.token_file of -config)")
}

// defineConn defines the flags that reach the admin listener (those of
// `xdsbridge healthcheck`, which needs no token: /readyz is open).
func (f *statusFlags) defineConn(fs *flag.FlagSet, timeout time.Duration) {
	f.admin = fs.String("admin", "", "the admin listener: host:port (https when -config has admin.tls) or a URL (default: admin.listen of -config, on 127.0.0.1 if it listens on every address)")
	f.caFile = fs.String("cacert", "", "CA file to verify the admin listener's certificate (https; default: the system's)")
	f.certFile = fs.String("cert", "", "client certificate file, for an admin listener with client_ca_file (mTLS)")
	f.keyFile = fs.String("key", "", "client key file, with -cert")
	f.timeout = fs.Duration("timeout", timeout, "how long to wait for the admin listener")
}

// status prints a running bridge's sources (the names two of them publish,
// the config reload state) and clients with their sync status, the
// sources alone (status sources), one client's resources (-node), or the
// explanation of a service's hosts (status hosts SERVICE), read from its
// admin listener.
func status(fs *flag.FlagSet, f *cmdFlags, stdout io.Writer) error {
	args := fs.Args()
	var hosts, onlySources bool
	var service string
	if len(args) > 0 {
		switch args[0] {
		case "hosts":
			hosts = true
		case "sources":
			onlySources = true
		default:
			return fmt.Errorf("unexpected arguments %q (want: status [flags], status hosts [SERVICE] or status sources)", args)
		}
		args = args[1:]
		if hosts && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			service, args = args[0], args[1:]
		}
		// Flags may follow: status hosts web -admin ADDR.
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", fs.Args())
		}
	}
	c, err := newAdminClient(f)
	if err != nil {
		return err
	}
	switch {
	case hosts:
		var out map[string][]map[string]any
		if err := c.get("/debug/hosts", url.Values{"service": {service}}, &out); err != nil {
			return err
		}
		if service != "" && len(out[service]) == 0 {
			return fmt.Errorf("service %q has no hosts (or is not known)", service)
		}
		printHosts(stdout, out)
		srcs, err := c.debugSources()
		if err != nil {
			return err
		}
		printDropped(stdout, service, srcs)
		return nil
	case *f.status.node != "":
		var d struct {
			Node    string                   `json:"node"`
			Streams []xds.ClientStreamDetail `json:"streams"`
		}
		if err := c.get("/debug/clients", url.Values{"node": {*f.status.node}}, &d); err != nil {
			return err
		}
		if len(d.Streams) == 0 {
			return fmt.Errorf("no client with node id %q is connected", *f.status.node)
		}
		printNode(stdout, d.Streams, time.Now())
		return nil
	}
	d, err := c.debugSourcesAll()
	if err != nil {
		return err
	}
	printSources(stdout, d.Sources)
	printOwnership(stdout, d, time.Now())
	if onlySources {
		return nil
	}
	var cl struct {
		Clients []xds.ClientStatus `json:"clients"`
		NACKs   uint64             `json:"nacks"`
	}
	if err := c.get("/debug/clients", nil, &cl); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	printClients(stdout, cl.Clients, cl.NACKs, time.Now())
	return nil
}

// adminClient reads the admin listener's /debug endpoints.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func newAdminClient(f *cmdFlags) (*adminClient, error) {
	sf := f.status
	addr, tokenFile, withToken := *sf.admin, "", sf.tokenFile != nil
	if withToken {
		tokenFile = *sf.tokenFile
	}
	scheme := "http"
	if addr == "" || (withToken && tokenFile == "") {
		cfg, err := loadConfig(*f.config)
		if err != nil {
			return nil, err
		}
		if addr == "" {
			addr = localAddr(cfg.Admin.Listen)
		}
		// The listener of -config speaks TLS: so does an -admin without
		// a scheme (over http the token would cross in clear text).
		if cfg.Admin.TLS != nil {
			scheme = "https"
		}
		if withToken && tokenFile == "" {
			// Relative to the config file's directory, as the server
			// reads it.
			tokenFile = cfg.Path(cfg.Admin.TokenFile)
		}
	}
	base := addr
	if !strings.Contains(addr, "://") {
		base = scheme + "://" + addr
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("-admin %q: want host:port or a URL", addr)
	}
	c := &adminClient{base: strings.TrimSuffix(u.String(), "/"), http: &http.Client{Timeout: *sf.timeout}}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		c.token = strings.TrimRight(string(b), "\r\n")
	}
	if *sf.caFile != "" || *sf.certFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if *sf.caFile != "" {
			pem, err := os.ReadFile(*sf.caFile)
			if err != nil {
				return nil, fmt.Errorf("-cacert: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-cacert: %s: no certificate", *sf.caFile)
			}
		}
		if *sf.certFile != "" {
			cert, err := tls.LoadX509KeyPair(*sf.certFile, *sf.keyFile)
			if err != nil {
				return nil, fmt.Errorf("-cert/-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.http.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return c, nil
}

// localAddr is where to reach a listener listening on addr: on
// 127.0.0.1 when it listens on every address.
func localAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func (c *adminClient) get(path string, q url.Values, v any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s: %s (the admin listener needs a token: -token-file or admin.token_file)", path, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// printClients prints a summary line, then one row per client and type.
func printClients(w io.Writer, clients []xds.ClientStatus, nacks uint64, now time.Time) {
	counts := map[string]int{}
	for _, c := range clients {
		for _, t := range c.Types {
			counts[t.State]++
		}
	}
	fmt.Fprintf(w, "%d streams; types: %d SYNCED, %d STALE, %d NACKED, %d NOT_SENT; %d NACKs since start\n\n",
		len(clients), counts[xds.Synced], counts[xds.Stale], counts[xds.Nacked], counts[xds.NotSent], nacks)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTREAM\tMODE\tAGE\tMEMORY\tTYPE\tSTATE\tACKED\tCURRENT\tSUBSCRIBED\tLATENCY LAST/P50/P99\tDETAIL")
	for _, c := range clients {
		lead := fmt.Sprintf("%s\t%d\t%s\t%s\t%s", orDash(term(c.Node)), c.Stream, c.Mode, age(now.Sub(c.Connected)), kib(c.EstimatedBytes))
		if len(c.Types) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t\n", lead)
			continue
		}
		for _, t := range c.Types {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", lead, t.Type, t.State, orDash(t.Acked), t.Current, subscribed(t), latency(t), detail(t, now))
		}
	}
	tw.Flush()
}

// printNode prints one client's streams, each type's status, and every
// resource of interest with the version held.
func printNode(w io.Writer, streams []xds.ClientStreamDetail, now time.Time) {
	for i, s := range streams {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "node %s", term(s.Node))
		if s.Cluster != "" {
			fmt.Fprintf(w, " (cluster %s)", term(s.Cluster))
		}
		fmt.Fprintf(w, ": %s stream %d (%s)", s.Mode, s.Stream, term(s.TypeURL))
		if s.Peer != "" {
			fmt.Fprintf(w, " from %s", term(s.Peer))
		}
		fmt.Fprintf(w, ", connected %s ago; %d responses, %d NACKs; memory estimate %s\n\n", age(now.Sub(s.Connected)), s.Responses, s.NACKs, kib(s.EstimatedBytes))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tSTATE\tACKED\tSENT\tCURRENT\tSUBSCRIBED\tLATENCY LAST/P50/P99\tSAMPLES\tDETAIL")
		for _, t := range s.Types {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", t.Type, t.State, orDash(t.Acked), orDash(t.Sent), t.Current, subscribed(t), latency(t), t.Samples, detail(t, now))
		}
		tw.Flush()
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tNAME\tCURRENT\tHELD\tSYNCED")
		for _, r := range s.Resources {
			held := orDash(r.Held)
			if r.Held == "" && !r.Synced {
				held = "- (none, or older)"
			}
			if r.Rejected {
				held += " (rejected current)"
			}
			synced := "yes"
			if !r.Synced {
				synced = "NO"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Type, term(r.Name), r.Current, held, synced)
		}
		tw.Flush()
	}
}

// printHosts prints /debug/hosts as a table, by service then host.
func printHosts(w io.Writer, hosts map[string][]map[string]any) {
	services := make([]string, 0, len(hosts))
	for s := range hosts {
		services = append(services, s)
	}
	sort.Strings(services)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tHOST\tDISCOVERED\tSOURCE\tSOURCE HEALTH\tCHECK\tPUBLISHED\tHEALTH\tABSENT SINCE\tRULE\tSOURCE CHECKS")
	for _, s := range services {
		for _, h := range hosts[s] {
			check := str(h["check"])
			if check == "none" && h["source_checks"] != nil {
				check = "source's" // no xdsbridge check: the source's own checks decide
			}
			// A host checked through HDS: which checker said what.
			if cs, ok := h["check_state"].(map[string]any); ok {
				if sum, ok := cs["summary"].(string); ok {
					check += " (HDS: " + term(sum) + ")"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", term(s), str(h["host"]), str(h["discovered"]), str(h["source"]),
				str(h["source_health"]), check, str(h["published"]), str(h["health"]), str(h["absent_since"]), str(h["rule"]), str(h["source_checks"]))
		}
	}
	tw.Flush()
}

func str(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return orDash(term(v))
	case bool:
		if v {
			return "yes"
		}
		return "no"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// term escapes what a client or a source chose (node ids, names, rules)
// for the terminal: control characters (escape sequences, new lines and
// tabs that would forge rows or columns) are written as Go escapes.
func term(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) || r == utf8.RuneError }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func subscribed(t xds.TypeStatus) string {
	if t.Wildcard {
		return "*"
	}
	return fmt.Sprint(t.Subscribed)
}

func latency(t xds.TypeStatus) string {
	if t.Samples == 0 {
		return "-"
	}
	return fmt.Sprintf("%s/%s/%s", round(t.LatencyLast), round(t.LatencyP50), round(t.LatencyP99))
}

func detail(t xds.TypeStatus, now time.Time) string {
	var parts []string
	switch t.State {
	case xds.Stale:
		parts = append(parts, "since "+age(now.Sub(t.Since))+" ago")
	case xds.Nacked:
		if t.NACK != nil {
			parts = append(parts, fmt.Sprintf("rejected %s %s ago: %q", t.NACK.Version, age(now.Sub(t.NACK.At)), t.NACK.Detail))
		}
	}
	if len(t.Behind) > 0 {
		parts = append(parts, "lacks "+term(strings.Join(t.Behind, ",")))
	}
	return strings.Join(parts, "; ")
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// kib is an estimate in KiB.
func kib(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("~%.0f KiB", float64(n)/1024)
}

// probeReady (xdsbridge healthcheck) returns nil, and the process exits 0,
// when the bridge's /readyz answers 200, and an error naming the reason
// otherwise: a scratch container image has no shell or curl for its health
// check.
func probeReady(f *cmdFlags, stdout io.Writer) error {
	c, err := newAdminClient(f)
	if err != nil {
		return err
	}
	resp, err := c.http.Get(c.base + "/readyz")
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s/readyz: %s: %s", c.base, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintln(stdout, "ready")
	return nil
}
