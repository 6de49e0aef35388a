package engine

import (
	"errors"
	"testing"

	"github.com/agq/agq/records"
)

func TestTheEngineNamesTheJobOfARefusal(t *testing.T) {
	t.Run("AJobsRefusalHoldsItsError", func(t *testing.T) {
		var job *records.JobError
		var state *records.StateError
		err := jobError("j1", &records.StateError{Status: "failed"})
		if !errors.As(err, &job) || job.JobID != "j1" || !errors.As(job.Err, &state) || state.Status != "failed" {
			t.Errorf("%#v: not a JobError about j1 holding its StateError", err)
		}
	})
	t.Run("AUniqueKeyConflictIsNamed", func(t *testing.T) {
		err := jobError("j1", records.ErrConflict)
		if !errors.Is(err, records.ErrUniqueKeyHeld) {
			t.Errorf("%v: not ErrUniqueKeyHeld", err)
		}
	})
}
