package commands

import (
	"context"
	"errors"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// A worker's key may submit jobs — a parent spawning its children — and
// read, wait on and follow the jobs it submitted, and no others (BRIEF §3).
// Each job records the worker principal that submitted it.

// submitter is the principal a session's submissions record: its name for
// a worker's key, "" for any other key (they read every job anyway).
func submitter(sess *Session) string {
	if p := sess.principal(); p.Role == auth.RoleWorker {
		return p.Name
	}
	return ""
}

// setSubmitter records the session's principal in jobs it submits.
func setSubmitter(sess *Session, jobs []records.NewJob) {
	if by := submitter(sess); by != "" {
		for i := range jobs {
			jobs[i].SubmittedBy = by
		}
	}
}

// errNotSubmitted refuses a worker's key a job it did not submit.
func errNotSubmitted(id string) error {
	return resp.CodeErrorf("NOPERM", "a worker's key reads only the jobs it submitted, and job %s is not one", id)
}

// mayRead checks that the session may read job j: any reader may; a
// worker's key only a job it submitted.
func mayRead(sess *Session, j records.Job) error {
	if by := submitter(sess); by != "" && j.SubmittedBy != by {
		return errNotSubmitted(j.ID)
	}
	return nil
}

// mayReadID is mayRead for a job named by id, read only for a worker's key.
// An unknown job passes: the command answers for it as it does for anyone.
func (s *Server) mayReadID(ctx context.Context, sess *Session, id string) error {
	if submitter(sess) == "" {
		return nil
	}
	j, err := sess.eng.JobGet(ctx, id)
	if errors.Is(err, records.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return mayRead(sess, j)
}
