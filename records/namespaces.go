package records

import (
	"errors"
	"fmt"
	"time"
)

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

// NamespaceChange is a NAMESPACE.CONFIG: each field set is changed (to its
// zero value: removed, or for retention returned to the server's).
type NamespaceChange struct {
	MaxUnfinished   *int64
	SubmitRate      *Rate
	MaxRunning      *int
	RetainCompleted *time.Duration
	RetainFailed    *time.Duration
}

// HasQuota says whether submissions to n are counted against a quota.
func (n Namespace) HasQuota() bool { return n.MaxUnfinished > 0 || n.SubmitRate > 0 }

// ErrDefaultNamespace refuses to delete the default namespace.
var ErrDefaultNamespace = errors.New("the default namespace cannot be deleted")

// ErrNamespaceDeleting refuses to create a namespace of the name of one
// still being deleted.
var ErrNamespaceDeleting = errors.New("is being deleted")

// UnfinishedError refuses to delete a namespace holding jobs not yet ended.
type UnfinishedError struct{ N int64 }

func (e *UnfinishedError) Error() string { return fmt.Sprintf("%d unfinished jobs", e.N) }

// QuotaError refuses a submission past a namespace's quota: its
// unfinished jobs (Unfinished, the most it may hold) or its submission
// rate (Rate).
type QuotaError struct {
	Namespace  string
	Unfinished int64
	Rate       bool
}

func (e *QuotaError) Error() string {
	if e.Rate {
		return fmt.Sprintf("namespace %s is over its submission rate", e.Namespace)
	}
	return fmt.Sprintf("namespace %s holds %d unfinished jobs, its most", e.Namespace, e.Unfinished)
}

// NoNamespaceError says a namespace does not exist (or is being deleted).
type NoNamespaceError struct{ Name string }

func (e *NoNamespaceError) Error() string { return "no such namespace " + e.Name }

// ForeignPrincipalError refuses a key for a principal of another
// namespace: principals are unique across namespaces. Namespace is "" for
// a key of every namespace.
type ForeignPrincipalError struct{ Namespace string }

func (e *ForeignPrincipalError) Error() string {
	if e.Namespace == "" {
		return "principal is a key of every namespace"
	}
	return "principal belongs to namespace " + e.Namespace
}
