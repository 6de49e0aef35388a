package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

func TestTheEngineNamesTheSubjectOfARefusal(t *testing.T) {
	failure := errors.New("connection reset")
	tests := []struct {
		name string
		of   subject
		err  error
		// want checks the error refusal answers.
		want func(error) bool
	}{
		{"AJobsRefusalHoldsItsError", aJob, &records.StateError{Status: "failed"}, func(err error) bool {
			var job *records.JobError
			var state *records.StateError
			return errors.As(err, &job) && job.JobID == "s1" && errors.As(job.Err, &state) && state.Status == "failed"
		}},
		{"AStepsRefusalIsAboutItsJob", aJob, &records.StepNotBegunError{StepID: "fetch"}, func(err error) bool {
			var job *records.JobError
			var notBegun *records.StepNotBegunError
			return errors.As(err, &job) && job.JobID == "s1" && errors.As(err, &notBegun)
		}},
		{"AMissingJobIsNamed", aJob, fmt.Errorf("reading: %w", records.ErrNotFound), func(err error) bool {
			var job *records.JobError
			return errors.As(err, &job) && job.JobID == "s1" && errors.Is(err, records.ErrNotFound)
		}},
		{"AUniqueKeyConflictIsNamed", aJob, records.ErrConflict, func(err error) bool {
			var job *records.JobError
			return errors.As(err, &job) && job.JobID == "s1" && errors.Is(err, records.ErrUniqueKeyHeld)
		}},
		{"AnUnknownWorkerMustRegister", aWorker, store.ErrWorkerUnknown, func(err error) bool {
			var notRegistered *records.WorkerNotRegisteredError
			return errors.As(err, &notRegistered) && notRegistered.ID == "s1"
		}},
		{"AMissingWorkerMustRegister", aWorker, records.ErrNotFound, func(err error) bool {
			var notRegistered *records.WorkerNotRegisteredError
			return errors.As(err, &notRegistered) && notRegistered.ID == "s1"
		}},
		{"AMissingScheduleIsNamed", aSchedule, records.ErrNotFound, func(err error) bool {
			var missing *records.ScheduleNotFoundError
			return errors.As(err, &missing) && missing.Name == "s1"
		}},
		{"AFailureIsNoRefusal", aJob, failure, func(err error) bool { return err == failure }},
		{"AWorkersFailureIsNoRefusal", aWorker, failure, func(err error) bool { return err == failure }},
		{"ARefusalOfAnotherSubjectPassesAsItIs", aSchedule, records.ErrConflict, func(err error) bool { return err == records.ErrConflict }},
		{"NoErrorIsNone", aJob, nil, func(err error) bool { return err == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusal(tt.of, "s1", tt.err); !tt.want(got) {
				t.Errorf("refusal(%d, s1, %#v) = %#v", tt.of, tt.err, got)
			}
		})
	}
}
