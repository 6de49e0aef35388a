package store

import "sort"

// sortClaimed restores claim order: UPDATE … RETURNING does not keep the
// ORDER BY of its CTE.
func sortClaimed(jobs []Job) {
	sort.SliceStable(jobs, func(i, k int) bool {
		a, b := jobs[i], jobs[k]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.Seq < b.Seq
	})
}
