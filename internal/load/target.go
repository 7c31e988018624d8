// The target as the harness drives it: the serving side in this process
// or in a child process ("xdsload serve") driven over stdin and stdout.

package load

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// target is the serving side as the harness drives it.
type target interface {
	Addr() string
	Change(seq, svc int) error
	Stats() (ServerStats, error)
	// Usage is the CPU seconds of Stats only, without the heap profile
	// (after a collection) a profiled child writes at each Stats, nor the
	// memory statistics (a stop of the world): for samples taken while the
	// server works, and the CPU at each phase's bounds (Stats reads the CPU
	// before the profile's collection, which would count in the phase
	// after it).
	Usage() (ServerStats, error)
	// Profile ends the serving process's CPU profile and starts one into
	// path ("": none), so that each phase of a run has its own.
	Profile(path string) error
	Close() error
}

type inProcess struct{ *server }

// Profile: an in-process target is profiled with the harness's clients,
// so not at all.
func (inProcess) Profile(string) error { return nil }

func (p inProcess) Stats() (ServerStats, error) {
	st, err := p.server.Stats()
	st.InProcess = true
	return st, err
}

func (p inProcess) Usage() (ServerStats, error) {
	return ServerStats{CPUSeconds: cpuSeconds(), InProcess: true}, nil
}

// ChildEnv makes a re-executed binary (the harness itself, or the test
// binary) run "serve".
const ChildEnv = "XDSLOAD_SERVE_CHILD"

// ServeMemoryLimitEnv, when set, is the serving child's GOMEMLIMIT (the
// runtime's soft memory limit, which the bridge sets from memory_limit),
// apart from the harness's own.
const ServeMemoryLimitEnv = "XDSLOAD_SERVE_GOMEMLIMIT"

// child runs the serving side as "xdsload serve" in a child process.
type child struct {
	cmd  *exec.Cmd
	addr string

	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

func startChild(target string, services, endpoints, clients int, cpuprofile string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "-target", target,
		"-services", fmt.Sprint(services), "-endpoints", fmt.Sprint(endpoints), "-clients", fmt.Sprint(clients)}
	if cpuprofile != "" {
		args = append(args, "-cpuprofile", cpuprofile)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	if v := os.Getenv(ServeMemoryLimitEnv); v != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+v) // the child's only
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	line, err := c.out.ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("serve child: %w", err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("serve child: unexpected %q", line)
	}
	c.addr = addr
	return c, nil
}

func (c *child) Addr() string { return c.addr }

func (c *child) Change(seq, svc int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := fmt.Fprintf(c.in, "C %d %d\n", seq, svc)
	return err
}

func (c *child) Profile(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := fmt.Fprintf(c.in, "P %s\n", path)
	return err
}

func (c *child) Stats() (ServerStats, error) { return c.query("S\n") }

func (c *child) Usage() (ServerStats, error) { return c.query("U\n") }

// query sends the child a stats command, and reads its answer.
func (c *child) query(cmd string) (ServerStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st ServerStats
	if _, err := io.WriteString(c.in, cmd); err != nil {
		return st, err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(line), &st)
}

func (c *child) Close() error {
	c.mu.Lock()
	_, _ = io.WriteString(c.in, "Q\n")
	c.in.Close()
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		return <-done
	}
}
