package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/agq/agq/internal/auth"
)

// The calls about a running job (JOB.UPDATE, STEP.*) name who calls and,
// optionally, which delivery they are about; the engine's rule
// (records.JobNow.Hold) decides whether the call applies.

// caller is who calls about a running job: an admin, or else the worker
// the session acts as.
func (s *Server) caller(ctx context.Context, sess *Session) (worker string, admin bool, err error) {
	if sess.principal().Role == auth.RoleAdmin {
		return "", true, nil
	}
	w, err := s.hotWorker(ctx, sess)
	return w.ID, false, err
}

// deliveryToken reads the token of a delivery in the form the store
// compares: any case, braces or urn: name the same token.
func deliveryToken(text string) (string, bool) {
	u, err := uuid.Parse(text)
	if err != nil {
		return "", false
	}
	return u.String(), true
}
