package main

import (
	"fmt"
	"runtime/debug"
)

// buildInfo is what the binary knows of its own build: the module version
// (a tag, or "(devel)" in a checkout), and the VCS revision, time and
// whether the tree had changes, as the go command stamped them.
type buildInfo struct {
	Version, Revision, Time, GoVersion string
	Modified                           bool
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "unknown", Revision: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version, b.GoVersion = info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionLine is what `delayq version` prints.
func versionLine() string {
	b := readBuildInfo()
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	if b.Time != "" {
		rev += " " + b.Time
	}
	return fmt.Sprintf("delayq %s, revision %s, %s", b.Version, rev, b.GoVersion)
}
