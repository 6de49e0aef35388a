package store

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// A re-submitted id whose job is in history is that job, as it is while
// the job is in jobs: answered with Created false when it asks for the same
// contents, refused (JobExistsError) otherwise. Jobs whose ids agq made up
// (NewJob.GeneratedID) cannot be there and are not looked for.
//
// The look comes before the insert, and the leader's mover may move the
// job in between: its id is then free in jobs, and the insert creates the
// job again. recheckHistory looks once more after the commit, with a
// snapshot that sees every move committed before the insert.

// historyHeld answers, by index in jobs, the result of each job whose id
// is held by a job in history.
func (s *Store) historyHeld(ctx context.Context, jobs []records.NewJob) (map[int]records.SubmitResult, error) {
	var idx []int32
	var ns, ids []string
	for i, j := range jobs {
		// An id PostgreSQL cannot store is no job's: the submission
		// answers it as it does.
		if !j.GeneratedID && storable(j.Namespace, j.ID) {
			idx, ns, ids = append(idx, int32(i)), append(ns, j.Namespace), append(ids, j.ID)
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	// jobs_history_id, a probe each.
	rows, err := s.Pool.Query(ctx, `
		SELECT i.n, h.id, h.queue, h.type, h.payload
		FROM unnest($1::int[], $2::text[], $3::text[]) AS i(n, namespace, id)
		CROSS JOIN LATERAL (SELECT * FROM jobs_history h WHERE h.namespace = i.namespace AND h.id = i.id LIMIT 1) h`,
		idx, ns, ids)
	if err != nil {
		return nil, err
	}
	type found struct {
		n              int32
		id, queue, typ string
		payload        []byte
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (f found, err error) {
		return f, r.Scan(&f.n, &f.id, &f.queue, &f.typ, &f.payload)
	})
	if err != nil {
		return nil, err
	}
	held := map[int]records.SubmitResult{}
	for _, f := range all {
		j := jobs[f.n]
		same := f.queue == j.Queue && f.typ == j.Type
		if same {
			// Compared as JSON values, as a submission compares them with
			// a job in jobs; a payload PostgreSQL refuses is no match.
			err := s.Pool.QueryRow(ctx, `SELECT $1::jsonb IS NOT DISTINCT FROM $2::jsonb`, nullJSON(j.Payload), nullJSON(f.payload)).Scan(&same)
			same = same && err == nil
		}
		held[int(f.n)] = records.SubmitResult{ID: f.id, Queue: j.Queue, Same: same}
	}
	return held, nil
}

// withoutHeld is jobs less those held in history, and each kept job's index
// in jobs.
func withoutHeld(jobs []records.NewJob, held map[int]records.SubmitResult) (rest []records.NewJob, at []int) {
	for i, j := range jobs {
		if _, ok := held[i]; !ok {
			rest, at = append(rest, j), append(at, i)
		}
	}
	return rest, at
}

// mergeHeld lays the results of the kept jobs (at their indexes) and the
// held ones out by index in a call of n jobs.
func mergeHeld(n int, held map[int]records.SubmitResult, at []int, res []records.SubmitResult) []records.SubmitResult {
	out := make([]records.SubmitResult, n)
	for i, r := range held {
		out[i] = r
	}
	for k, i := range at {
		out[i] = res[k]
	}
	return out
}

// submitAroundHistory runs submit, an atomic submission of jobs, for the
// jobs no job in history holds, and answers for those as well; one held
// with other contents fails the whole call.
func (s *Store) submitAroundHistory(ctx context.Context, jobs []records.NewJob, batch bool,
	submit func([]records.NewJob) ([]records.SubmitResult, []records.ReadyNote, error)) ([]records.SubmitResult, []records.ReadyNote, error) {
	held, err := s.historyHeld(ctx, jobs)
	if err != nil {
		return nil, nil, interpretError(err)
	}
	if len(held) == 0 {
		res, notes, err := submit(jobs)
		if err == nil {
			s.recheckHistory(ctx, jobs, res)
		}
		return res, notes, err
	}
	for i, r := range held {
		if !r.Same {
			return nil, nil, indexed(batch, i, &records.JobExistsError{ID: r.ID})
		}
	}
	rest, at := withoutHeld(jobs, held)
	var res []records.SubmitResult
	var notes []records.ReadyNote
	if len(rest) > 0 {
		if res, notes, err = submit(rest); err != nil {
			return nil, nil, err
		}
		s.recheckHistory(ctx, rest, res)
	}
	return mergeHeld(len(jobs), held, at, res), notes, nil
}

// submitEachAroundHistory is submitAroundHistory for independent
// submissions: a job held with other contents fails alone.
func (s *Store) submitEachAroundHistory(ctx context.Context, jobs []records.NewJob,
	submit func([]records.NewJob) ([]records.SubmitResult, []error, []records.ReadyNote)) ([]records.SubmitResult, []error, []records.ReadyNote) {
	held, err := s.historyHeld(ctx, jobs)
	if err != nil {
		errs := make([]error, len(jobs))
		for i := range errs {
			errs[i] = interpretError(err)
		}
		return make([]records.SubmitResult, len(jobs)), errs, nil
	}
	if len(held) == 0 {
		res, errs, notes := submit(jobs)
		s.recheckHistory(ctx, jobs, res)
		return res, errs, notes
	}
	rest, at := withoutHeld(jobs, held)
	errs := make([]error, len(jobs))
	for i, r := range held {
		if !r.Same {
			errs[i], held[i] = &records.JobExistsError{ID: r.ID}, records.SubmitResult{}
		}
	}
	var res []records.SubmitResult
	var notes []records.ReadyNote
	if len(rest) > 0 {
		var restErrs []error
		res, restErrs, notes = submit(rest)
		s.recheckHistory(ctx, rest, res)
		for k, i := range at {
			errs[i] = restErrs[k]
		}
	}
	return mergeHeld(len(jobs), held, at, res), errs, notes
}

// recheckHistory looks, after the commit, for the jobs res says were
// created under ids of their own in history: a job moved there while
// they were inserted (see above). A job found with the same contents is
// deleted again while nothing has touched it (still waiting for its first
// attempt, in no graph) and answered, in res, as the job in history. One
// already handed to a worker, or found with other contents, stays: it
// runs as a job delivered once more would. Nothing is found but for that
// race, and a failed look changes nothing.
func (s *Store) recheckHistory(ctx context.Context, jobs []records.NewJob, res []records.SubmitResult) {
	var created []records.NewJob
	var at []int
	for i, j := range jobs {
		if i < len(res) && res[i].Created && res[i].Delivered == nil && !j.GeneratedID {
			created, at = append(created, j), append(at, i)
		}
	}
	if len(created) == 0 {
		return
	}
	held, err := s.historyHeld(ctx, created)
	if err != nil || len(held) == 0 {
		return
	}
	var ns, ids []string
	for k, r := range held {
		if r.Same {
			ns, ids = append(ns, created[k].Namespace), append(ids, created[k].ID)
		}
	}
	rows, err := s.Pool.Query(ctx, `
		DELETE FROM jobs j USING unnest($1::text[], $2::text[]) AS d(namespace, id)
		WHERE j.namespace = d.namespace AND j.id = d.id AND j.status IN ('queued', 'scheduled') AND j.attempt = 0
		  AND j.after IS NULL AND NOT j.has_children
		RETURNING j.namespace, j.id`, ns, ids)
	type key struct{ ns, id string }
	gone, err := collect(rows, err, func(r pgx.CollectableRow) (k key, err error) { return k, r.Scan(&k.ns, &k.id) })
	if err != nil {
		return
	}
	for k, r := range held {
		if slices.Contains(gone, key{created[k].Namespace, created[k].ID}) {
			res[at[k]] = records.SubmitResult{ID: r.ID, Queue: r.Queue, Same: true}
		}
	}
}
