package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/registry"
	"github.com/agq/agq/store"
)

func TestTheEnginesErrorsAreTheAPIs(t *testing.T) {
	t.Run("RegistrationRefusals", func(t *testing.T) {
		for _, c := range []struct{ registry, api error }{
			{registry.ErrInvalidCapabilities, api.ErrInvalidCapabilities},
			{registry.ErrInvalidWorkerID, api.ErrInvalidWorkerID},
		} {
			err := apiError(fmt.Errorf("registering: %w", c.registry))
			if !errors.Is(err, c.api) || c.registry.Error() != c.api.Error() {
				t.Errorf("%v: not the API's %v", c.registry, c.api)
			}
		}
		var reg *api.InvalidRegistrationError
		err := apiError(&registry.InvalidRegistrationError{Reason: "no id"})
		if !errors.As(err, &reg) || reg.Reason != "no id" || reg.Error() != err.Error() {
			t.Errorf("%v: not the API's InvalidRegistrationError", err)
		}
	})
	t.Run("AJobsRefusalHoldsTheAPIsError", func(t *testing.T) {
		var job *api.JobError
		var state *api.StateError
		err := apiError(jobError("j1", &store.StateError{Status: "failed"}))
		if !errors.As(err, &job) || job.JobID != "j1" || !errors.As(job.Err, &state) || state.Status != "failed" {
			t.Errorf("%#v: not a JobError about j1 holding the API's StateError", err)
		}
	})
	t.Run("AUniqueKeyConflictIsNamed", func(t *testing.T) {
		err := jobError("j1", store.ErrConflict)
		if !errors.Is(err, api.ErrUniqueKeyHeld) {
			t.Errorf("%v: not ErrUniqueKeyHeld", err)
		}
	})
}
