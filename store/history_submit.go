package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// A re-submitted id whose job is in history is that job, as it is while
// the job is in jobs: answered with Created false when it asks for the same
// contents, refused (JobExistsError) otherwise. Jobs whose ids agq made up
// (NewJob.GeneratedID) cannot be there and are not looked for.

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
		return submit(jobs)
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
		return submit(jobs)
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
		for k, i := range at {
			errs[i] = restErrs[k]
		}
	}
	return mergeHeld(len(jobs), held, at, res), errs, notes
}
