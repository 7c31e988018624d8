// Package buildinfo tells which build of xdsbridge is running: the release
// version stamped at link time, and the commit, commit time and Go version
// that the Go toolchain records in the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, stamped at link time:
//
//	go build -ldflags "-X github.com/xdsbridge/xdsbridge/internal/buildinfo.Version=v0.1.0"
//
// Left empty, the module version from the build info is used (set by
// `go install ...@vX.Y.Z`), else "devel".
var Version string

// Revision, CommitTime and Modified stand in for the toolchain's
// vcs.revision, vcs.time and vcs.modified when the binary has none: the
// toolchain does not stamp a build from a git worktree (whose .git is a
// file) or from a source tree without .git, so the release script stamps
// them at link time as well. Stamped by the toolchain, its values win.
var Revision, CommitTime, Modified string

// Info describes one build.
type Info struct {
	// Version is the release version ("v0.1.0"), or "devel".
	Version string
	// Revision is the commit the binary was built from (vcs.revision);
	// "unknown" when built without VCS stamping (-buildvcs=false).
	Revision string
	// Time is the commit's time (vcs.time, RFC 3339), which keeps builds
	// reproducible; "unknown" without VCS stamping.
	Time string
	// Modified tells the work tree had uncommitted changes (vcs.modified).
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns the running binary's build info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(Version, bi)
}

// fromBuildInfo derives Info from the link-time version and the toolchain's
// build info (nil when the binary has none).
func fromBuildInfo(version string, bi *debug.BuildInfo) Info {
	in := Info{
		Version:   version,
		Revision:  orUnknown(Revision),
		Time:      orUnknown(CommitTime),
		Modified:  Modified == "true",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	return in
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Commit is the revision, with "-modified" when the work tree had
// uncommitted changes.
func (i Info) Commit() string {
	if i.Modified {
		return i.Revision + "-modified"
	}
	return i.Revision
}

// String is the output of `xdsbridge version`.
func (i Info) String() string {
	return fmt.Sprintf("xdsbridge %s\ncommit:   %s\ndate:     %s\ngo:       %s\nplatform: %s\n",
		i.Version, i.Commit(), i.Time, i.GoVersion, i.Platform)
}

// Short is one line for headers: version, abbreviated commit, Go version.
func (i Info) Short() string {
	c := i.Commit()
	if len(i.Revision) > 12 {
		c = i.Revision[:12]
		if i.Modified {
			c += "-modified"
		}
	}
	return fmt.Sprintf("%s (%s, %s)", i.Version, c, i.GoVersion)
}
