package records

import (
	"encoding/json"
	"time"
)

// Worker states.
const (
	WorkerActive       = "ACTIVE"
	WorkerDraining     = "DRAINING"
	WorkerDead         = "DEAD"
	WorkerUnregistered = "UNREGISTERED"
)

// Worker is a registered worker.
type Worker struct {
	// Namespace is the namespace of the worker's key: the one it pops
	// from and reports in.
	Namespace         string
	ID                string
	Principal         string
	State             string
	Hostname          string
	Platform          string
	AgwVersion        string
	Capabilities      []string
	Metadata          json.RawMessage
	MaxConcurrentJobs int
	Stats             json.RawMessage
	RegisteredAt      time.Time
	LastHeartbeatAt   time.Time
	StateChangedAt    time.Time
	// TimedOutJobs counts jobs this worker let run past their timeout.
	TimedOutJobs  int
	LastTimeoutAt *time.Time
}

// HeartbeatResult is what a heartbeat tells its worker: to drain, and the
// jobs whose cancellation was asked.
type HeartbeatResult struct {
	Drain   bool
	Cancels []string
}

// WorkerPageParams pages through workers by id.
type WorkerPageParams struct {
	// Live selects ACTIVE and DRAINING workers; otherwise State, if set.
	Live  bool
	State string
	After string
	Limit int
}

// Moved is a job the watchdog, a worker's (re-)registration or a release
// moved out of running, as every node hears it: queued again, failed or
// cancelled; or, with DeadWorker set instead, a worker the watchdog
// declared DEAD.
type Moved struct {
	Namespace  string `json:"n,omitempty"`
	ID         string `json:"i,omitempty"`
	Status     string `json:"s,omitempty"`
	Queue      string `json:"q,omitempty"`
	Type       string `json:"t,omitempty"`
	Attempt    int    `json:"a,omitempty"`
	DeadWorker string `json:"dw,omitempty"`
	// Registered is a worker that registered again with other
	// capabilities: no job moved.
	Registered string `json:"rw,omitempty"`
}

// Key is a stored key: the principal it authenticates, allowed to
// connect, with its role.
type Key struct {
	Name string
	Role string
	// Namespace is the namespace the key acts in; "" for an admin or a
	// viewer of every namespace.
	Namespace string
	KeyDigest []byte
	Source    string
	CreatedAt time.Time
}
