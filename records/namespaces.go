package records

import "time"

// DefaultNamespace always exists: a client that never names a namespace
// acts in it, and every row stored before namespaces lives there.
const DefaultNamespace = "default"

// Namespace is a tenant's own agq: its settings and where it stands.
type Namespace struct {
	Name string
	// MaxUnfinished caps the jobs not yet ended, 0 when unset.
	MaxUnfinished int64
	// SubmitRate jobs may be submitted per SubmitPeriod; 0 when unset.
	SubmitRate   int
	SubmitPeriod time.Duration
	// MaxRunning caps the running jobs, 0 when unset.
	MaxRunning int
	// RetainCompleted and RetainFailed override the server's retention;
	// 0 when unset.
	RetainCompleted, RetainFailed time.Duration
	// Deleting says NAMESPACE.DELETE is removing it.
	Deleting  bool
	CreatedAt time.Time
}

// NamespaceCounts is where a namespace stands now.
type NamespaceCounts struct {
	Unfinished, Running, SubmittedLastMinute int64
}
