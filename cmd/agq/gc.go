package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is agq's garbage collector target when GOGC is unset.
// The job flow allocates fast and keeps little alive: at Go's default of
// 100 the collector took a quarter to a third of agq's CPU at full rate;
// at 300 agq spends 17–22 µs of CPU a job instead of 26–31 µs
// (docs/performance.md), for a heap that may grow to four times what is
// live. GOGC, and GOMEMLIMIT to cap the heap, still decide when set.
const defaultGCPercent = 300

func setGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}
