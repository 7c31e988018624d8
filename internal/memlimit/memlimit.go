// Package memlimit sets the Go runtime's soft memory limit
// (debug.SetMemoryLimit, what GOMEMLIMIT sets) from the configuration's
// memory_limit: "auto" (the default) derives it from the container's cgroup
// memory limit, a size sets it, "off" leaves the runtime alone.
//
// Why a limit: with the default GOGC=100 the heap grows to twice the live
// heap before a collection, so a bridge whose live heap is 300 MB can reach
// 600 MB and more of RSS; a container limited to 512 MiB is then killed
// although the data fits. A soft limit makes the collector work harder only
// near the limit. Under "auto" it is Fraction (90 %) of the cgroup limit, the
// rest left for what the Go runtime does not count (thread stacks, the
// binary, fragmentation). Without a cgroup limit (memory.max "max", or not
// in a container) "auto" sets nothing; a GOMEMLIMIT in the environment
// always wins (the runtime read it at start; it is not overridden).
package memlimit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Fraction of the cgroup limit that "auto" sets as the soft limit.
const Fraction = 0.9

// DefaultCgroupRoot is where the cgroup file system is mounted.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// Setting is a parsed memory_limit.
type Setting struct {
	Auto  bool  // derive from the cgroup limit
	Bytes int64 // an explicit limit; 0 with !Auto: off
}

// Parse reads memory_limit: "" or "auto", "off", or a size in bytes with an
// optional unit (KiB, MiB, GiB, KB, MB, GB; "512MiB", "1.5GiB",
// "536870912").
func Parse(s string) (Setting, error) {
	switch t := strings.TrimSpace(s); strings.ToLower(t) {
	case "", "auto":
		return Setting{Auto: true}, nil
	case "off", "none", "0":
		return Setting{}, nil
	default:
		n, err := parseSize(t)
		if err != nil {
			return Setting{}, fmt.Errorf("memory_limit: %q is not auto, off or a size (512MiB, 1GiB, bytes): %v", s, err)
		}
		if n < 16<<20 {
			return Setting{}, fmt.Errorf("memory_limit: %q is below 16MiB", s)
		}
		return Setting{Bytes: n}, nil
	}
}

var units = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

func parseSize(s string) (int64, error) {
	low := strings.ToLower(s)
	mult := 1.0
	for _, u := range units {
		if rest, ok := strings.CutSuffix(low, u.suffix); ok {
			low, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(low, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errors.New("not a size")
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, errors.New("too large")
	}
	return int64(v), nil
}

// CgroupLimit returns the memory limit of the cgroup this process is in,
// read under root (cgroup v2: memory.max of the process's cgroup, or of
// the root of the mount in a container's namespace; v1:
// memory/memory.limit_in_bytes). ok is false when there is none ("max",
// v1's near-2^63 "unlimited", or no file).
func CgroupLimit(root string) (limit int64, ok bool) {
	var candidates []string
	// v2: the process's own cgroup (/proc/self/cgroup "0::/path"), then
	// the mount's root (a container sees its own cgroup there).
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil && root == DefaultCgroupRoot {
		for l := range strings.SplitSeq(string(b), "\n") {
			if p, ok := strings.CutPrefix(l, "0::"); ok && p != "/" && p != "" {
				candidates = append(candidates, filepath.Join(root, filepath.Clean(p), "memory.max"))
			}
		}
	}
	candidates = append(candidates, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, f := range candidates {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		// v1 writes "no limit" as a page-rounded 2^63-1.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// Result is what Apply did.
type Result struct {
	// Limit is the soft limit set, in bytes; 0: none set by memory_limit.
	Limit int64
	// Source: "cgroup", "config", "env" (GOMEMLIMIT, left as is), "off",
	// or "none" (auto without a cgroup limit).
	Source string
	// Cgroup is the cgroup limit read under auto (0: none).
	Cgroup int64
}

// Apply sets the runtime's soft memory limit as s says, reading the cgroup
// limit under root. getenv is os.Getenv (a test's fake).
func Apply(s Setting, root string, getenv func(string) string) Result {
	if v := getenv("GOMEMLIMIT"); v != "" && v != "off" {
		return Result{Limit: debug.SetMemoryLimit(-1), Source: "env"}
	}
	switch {
	case s.Bytes > 0:
		debug.SetMemoryLimit(s.Bytes)
		return Result{Limit: s.Bytes, Source: "config"}
	case s.Auto:
		cg, ok := CgroupLimit(root)
		if !ok {
			return Result{Source: "none"}
		}
		l := int64(float64(cg) * Fraction)
		debug.SetMemoryLimit(l)
		return Result{Limit: l, Source: "cgroup", Cgroup: cg}
	}
	return Result{Source: "off"}
}
