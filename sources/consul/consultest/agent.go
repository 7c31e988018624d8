// Package consultest runs real Consul agents (`consul agent -dev` on
// loopback ports) for tests: the sources/consul tests and the end-to-end
// tests share it.
package consultest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulVersion is the agent version the tests run (tools/consul pins it).
const ConsulVersion = "1.14.11"

// Binary finds the agent binary: $XDSBRIDGE_CONSUL_BIN, the CI cache
// (.ci/install.d/consul.sh), or consul on PATH. Without one the test is
// skipped, or fails when XDSBRIDGE_REQUIRE_INTEGRATION=1.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("XDSBRIDGE_CONSUL_BIN"); p != "" {
		return p
	}
	cache := os.Getenv("XDSBRIDGE_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "xdsbridge")
		}
	}
	if cache != "" {
		p := filepath.Join(cache, "bin", "consul-"+ConsulVersion)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p
	}
	msg := "no consul binary: set XDSBRIDGE_CONSUL_BIN or run .ci/install.d/consul.sh"
	if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Agent is a `consul agent -dev` (or a persistent single server) on
// loopback ports of its own.
type Agent struct {
	T     testing.TB
	Bin   string
	DC    string
	Node  string
	Ports map[string]int
	Extra []string
	// Persistent agents (StartPersistentAgent) are single-server agents
	// (-server -bootstrap-expect=1, not -dev) whose data directory
	// survives Restart, so the catalog does too.
	Persistent bool
	DataDir    string
	Log        bytes.Buffer
	Client     *api.Client
	cmd        *exec.Cmd
	done       chan struct{}
	registered []*api.AgentServiceRegistration
}

var agentSeq atomic.Int64

// FreePort is a port free for TCP and UDP on 127.0.0.1 (Serf uses both),
// below the kernel's ephemeral range: an agent keeps its ports across
// Restart, and a port from the ephemeral range can be taken meanwhile by
// any outgoing connection on the machine (seen: "address already in use"
// when an agent came back).
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := 20000, ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 200 && hi-lo > 1000; i++ {
		p := lo + rand.IntN(hi-lo)
		if !portsGiven[p] && portFree(p) && claimPort(p) {
			portsGiven[p] = true // never twice in a process: an agent's six ports differ
			return p
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
	portLocks  []*os.File // held until the process exits
)

// claimPort takes port p for this test process against the other test
// processes of the run (go test runs packages in parallel, each with its
// own portsGiven): an exclusive flock on a file named for the port, held
// until the process exits. An agent's ports are free while it is stopped
// for an outage; without the claim another package's agent could take one
// and the restarted agent would fail to bind it.
func claimPort(p int) bool {
	dir := filepath.Join(os.TempDir(), "xdsbridge-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true // no shared directory: this process's own record only
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false // another test process holds it
	}
	portLocks = append(portLocks, f)
	return true
}

func portFree(p int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the lowest port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n // at or below 21000, FreePort takes the kernel's choice
}

// StartAgent starts a dev agent in datacenter dc and waits for its leader.
// It is stopped at the end of the test.
func StartAgent(t testing.TB, dc string, extra ...string) *Agent {
	t.Helper()
	return startAgent(t, dc, false, extra)
}

// StartPersistentAgent starts a single-server agent (-server
// -bootstrap-expect=1 with a data directory of its own, not -dev) in
// datacenter dc and waits for its leader. Its catalog survives Stop and
// Restart. It is stopped at the end of the test.
func StartPersistentAgent(t testing.TB, dc string, extra ...string) *Agent {
	t.Helper()
	return startAgent(t, dc, true, extra)
}

func startAgent(t testing.TB, dc string, persistent bool, extra []string) *Agent {
	t.Helper()
	a := &Agent{
		T: t, Bin: Binary(t), DC: dc, Extra: extra, Persistent: persistent,
		Node:  fmt.Sprintf("xdsb-%d-%d", os.Getpid(), agentSeq.Add(1)),
		Ports: map[string]int{},
	}
	if persistent {
		a.DataDir = t.TempDir()
	}
	for _, p := range []string{"http", "dns", "serf-lan", "serf-wan", "server", "grpc"} {
		a.Ports[p] = FreePort(t)
	}
	a.Start()
	t.Cleanup(a.Stop)
	cfg := api.DefaultConfig()
	cfg.Address = a.Addr()
	cfg.Token = ""
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Client = c
	a.WaitLeader()
	return a
}

func (a *Agent) Addr() string { return "127.0.0.1:" + strconv.Itoa(a.Ports["http"]) }

// Pid is the agent process's id (0 when stopped).
func (a *Agent) Pid() int {
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

func (a *Agent) Start() {
	a.T.Helper()
	mode := []string{"-dev", "-data-dir=" + a.T.TempDir()}
	if a.Persistent {
		mode = []string{"-server", "-bootstrap-expect=1", "-data-dir=" + a.DataDir,
			"-hcl=performance { raft_multiplier = 1 }", "-hcl=disable_update_check = true"}
	}
	args := append([]string{"agent"}, mode...)
	args = append(args, "-datacenter="+a.DC, "-node="+a.Node,
		"-bind=127.0.0.1", "-client=127.0.0.1",
		"-grpc-tls-port=-1", "-hcl=check_update_interval = \"0s\"", "-log-level=warn", "-node-meta=zone:z-"+a.DC, "-node-meta=rack:r1")
	for _, p := range []string{"http", "dns", "serf-lan", "serf-wan", "server", "grpc"} {
		args = append(args, fmt.Sprintf("-%s-port=%d", p, a.Ports[p]))
	}
	args = append(args, a.Extra...)
	a.Log.Reset()
	a.cmd = exec.Command(a.Bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = &a.Log, &a.Log
	if err := a.cmd.Start(); err != nil {
		a.T.Fatal(err)
	}
	a.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(a.cmd, a.done)
}

// Pause stops the agent process (SIGSTOP): its listening sockets still
// accept connections, but nothing answers. Resume continues it.
func (a *Agent) Pause() {
	a.T.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		a.T.Fatal(err)
	}
}

// Resume continues a paused agent (SIGCONT); it does nothing for one that
// is not running.
func (a *Agent) Resume() {
	if a.cmd != nil {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Stop kills the agent and waits for it to exit.
func (a *Agent) Stop() {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	<-a.done
	a.cmd = nil
}

// Restart starts a new agent process with the same ports and node name;
// a dev agent's data is gone, so services must be registered again (a
// persistent agent keeps its data directory and catalog).
func (a *Agent) Restart() {
	a.T.Helper()
	a.Start()
	a.WaitLeader()
}

func (a *Agent) WaitLeader() {
	a.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := a.Client.Status().Leader(); err == nil && l != "" {
			// The node's own registration (and its serfHealth check) lands
			// shortly after the leader is elected; the leader may register
			// the node before the agent's anti-entropy sync adds its node
			// meta, so wait for that too (tests derive wants from it).
			if n, _, err := a.Client.Catalog().Node(a.Node, nil); err == nil && n != nil && n.Node != nil &&
				n.Node.Meta["zone"] == "z-"+a.DC && n.Node.Meta["rack"] == "r1" {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.T.Fatalf("consul agent %s did not become ready (%s); log:\n%s", a.Node, a.State(), a.Log.String())
}

// State says whether the agent process runs, or how it ended, with the
// last lines of its log when it ended (the reason it could not serve).
func (a *Agent) State() string {
	if a.cmd == nil {
		return "stopped"
	}
	select {
	case <-a.done:
	default:
		return fmt.Sprintf("process %d running", a.cmd.Process.Pid)
	}
	lines := strings.Split(strings.TrimSpace(a.Log.String()), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return fmt.Sprintf("process %d ended: %v; its last lines:\n%s", a.cmd.Process.Pid, a.cmd.ProcessState, strings.Join(lines, "\n"))
}

func (a *Agent) Register(r *api.AgentServiceRegistration) {
	a.T.Helper()
	if err := a.Client.Agent().ServiceRegister(r); err != nil {
		a.T.Fatalf("registering %s: %v", r.ID, err)
	}
	a.registered = append(a.registered, r)
}

func (a *Agent) Deregister(id string) {
	a.T.Helper()
	if err := a.Client.Agent().ServiceDeregister(id); err != nil {
		a.T.Fatalf("deregistering %s: %v", id, err)
	}
}

func (a *Agent) TTL(checkID, status string) {
	a.T.Helper()
	if err := a.Client.Agent().UpdateTTL(checkID, "test", status); err != nil {
		a.T.Fatalf("updating %s: %v", checkID, err)
	}
}

// ReRegister registers again everything registered so far (after restart).
func (a *Agent) ReRegister() {
	a.T.Helper()
	regs := a.registered
	a.registered = nil
	for _, r := range regs {
		a.Register(r)
	}
}
