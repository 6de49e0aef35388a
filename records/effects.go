package records

// Effects is what committed transitions mean to the rest of agq: jobs
// claimable now or later, jobs that ended, room where running jobs are
// limited, the jobs moved out of running, and the ended jobs whose children
// wait to be settled. A transition of the store returns them instead of
// announcing anything inside its transaction; the engine publishes them
// once the commit returned.
type Effects struct {
	// Ready are jobs claimable now or at their note's time: pops to wake,
	// on every node.
	Ready []ReadyNote
	// Done are jobs that ended: JOB.WAIT waiters to wake.
	Done []string
	// Freed counts the jobs that left running: pops that limits held back.
	Freed Room
	// Moved are the jobs moved out of running, in the order of the
	// requests: a request re-sent, which changes nothing, is not here, so
	// that nothing is announced twice.
	Moved []string
	// Parents are jobs that ended, perhaps with children waiting for
	// them: every job in Done unless it is known to have none. Their
	// children are settled after the commit.
	Parents []string
}

// Merge adds o's effects to f's.
func (f *Effects) Merge(o Effects) {
	f.Ready = append(f.Ready, o.Ready...)
	f.Done = append(f.Done, o.Done...)
	f.Freed.Merge(o.Freed)
	f.Moved = append(f.Moved, o.Moved...)
	f.Parents = append(f.Parents, o.Parents...)
}

// Ended records that job id ended: waiters to wake, children to settle.
func (f *Effects) Ended(id string) {
	f.Done = append(f.Done, id)
	f.Parents = append(f.Parents, id)
}
