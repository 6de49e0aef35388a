package store

import "github.com/agq/agq/records"

// claimedBefore is claim order, which UPDATE … RETURNING does not keep.
func claimedBefore(a, b records.Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.RunAt.Equal(b.RunAt) {
		return a.RunAt.Before(b.RunAt)
	}
	return a.Seq < b.Seq
}
