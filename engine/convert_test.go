package engine

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/store"
)

// The API's records are copies of the store's: these tests fail when one
// side gains, loses or changes a field the other does not, and when a
// conversion leaves a field behind.

// storeOnly are the store's fields the API leaves out on purpose.
var storeOnly = map[string]bool{
	"NewJob.Hand": true, // the engine's hand-off, never the caller's
}

func TestTheAPIsRecordsHaveTheStoresFields(t *testing.T) {
	pairs := []struct{ store, api any }{
		{store.Job{}, api.Job{}},
		{store.NewJob{}, api.NewJob{}},
		{store.JobState{}, api.JobState{}},
		{store.JobTemplate{}, api.JobTemplate{}},
		{store.SubmitResult{}, api.SubmitResult{}},
		{store.ParentState{}, api.ParentState{}},
		{store.JobUpdateParams{}, api.Report{}},
		{store.JobListParams{}, api.JobListParams{}},
		{store.FailedJobsParams{}, api.FailedJobsParams{}},
		{store.MinuteCount{}, api.MinuteCount{}},
		{store.Worker{}, api.Worker{}},
		{store.HeartbeatResult{}, api.HeartbeatResult{}},
		{store.WorkerPageParams{}, api.WorkerPageParams{}},
		{store.Moved{}, api.Moved{}},
		{store.Queue{}, api.Queue{}},
		{store.QueueSummary{}, api.QueueSummary{}},
		{store.QueueJobsParams{}, api.QueueJobsParams{}},
		{store.Limits{}, api.Limits{}},
		{store.LimitsChange{}, api.LimitsChange{}},
		{store.Rate{}, api.Rate{}},
		{store.ReadyNote{}, api.ReadyNote{}},
		{store.Freed{}, api.Freed{}},
		{store.Schedule{}, api.Schedule{}},
		{store.KeyspaceJob{}, api.KeyspaceJob{}},
		{store.KeyspaceWorker{}, api.KeyspaceWorker{}},
		{store.KeyspaceJobsParams{}, api.KeyspaceJobsParams{}},
		{store.StepParams{}, api.StepParams{}},
		{store.StepBeginParams{}, api.StepBeginParams{}},
		{store.StepBeginResult{}, api.StepBeginResult{}},
		{store.StepFailParams{}, api.StepFailParams{}},
		{store.StepFailResult{}, api.StepFailResult{}},
		{store.StepSleepParams{}, api.StepSleepParams{}},
		{store.StepSleepResult{}, api.StepSleepResult{}},
		{store.Step{}, api.Step{}},
		{store.JobStepsParams{}, api.JobStepsParams{}},
		{store.NotOwnerError{}, api.NotOwnerError{}},
		{store.StaleDeliveryError{}, api.StaleDeliveryError{}},
		{store.StateError{}, api.StateError{}},
		{store.SnoozeLimitError{}, api.SnoozeLimitError{}},
		{store.JobExistsError{}, api.JobExistsError{}},
		{store.ParentNotFoundError{}, api.ParentNotFoundError{}},
		{store.StepNotBegunError{}, api.StepNotBegunError{}},
		{store.StepAttemptsError{}, api.StepAttemptsError{}},
		{store.StepKindError{}, api.StepKindError{}},
		{store.StepLimitError{}, api.StepLimitError{}},
	}
	for _, p := range pairs {
		s, a := reflect.TypeOf(p.store), reflect.TypeOf(p.api)
		t.Run(s.Name(), func(t *testing.T) { sameShape(t, s.Name(), s, a) })
	}
}

// sameShape reports where s (the store's) and a (the API's) differ: field
// names, tags and types, the records they hold compared the same way.
func sameShape(t *testing.T, path string, s, a reflect.Type) {
	t.Helper()
	if record(s) != record(a) || !record(s) && s != a {
		t.Errorf("%s: the store's is %v, the API's %v", path, s, a)
		return
	}
	if s.Kind() != a.Kind() {
		t.Errorf("%s: the store's is a %v, the API's a %v", path, s.Kind(), a.Kind())
		return
	}
	switch s.Kind() {
	case reflect.Struct:
		for i := range s.NumField() {
			sf := s.Field(i)
			name := s.Name() + "." + sf.Name
			af, ok := a.FieldByName(sf.Name)
			switch {
			case storeOnly[name]:
				if ok {
					t.Errorf("%s: the API has it, yet it is listed as the store's only", name)
				}
			case !ok:
				t.Errorf("%s: the API's %s lacks it", path+"."+sf.Name, a.Name())
			case sf.Tag != af.Tag:
				t.Errorf("%s: tag %q, the API's %q", path+"."+sf.Name, sf.Tag, af.Tag)
			case sf.Anonymous != af.Anonymous:
				t.Errorf("%s: embedded in one, not in the other", path+"."+sf.Name)
			default:
				sameShape(t, path+"."+sf.Name, sf.Type, af.Type)
			}
		}
		for i := range a.NumField() {
			if _, ok := s.FieldByName(a.Field(i).Name); !ok {
				t.Errorf("%s: the store's %s lacks it", path+"."+a.Field(i).Name, s.Name())
			}
		}
	case reflect.Pointer, reflect.Slice:
		sameShape(t, path+"[]", s.Elem(), a.Elem())
	case reflect.Map:
		sameShape(t, path+"[key]", s.Key(), a.Key())
		sameShape(t, path+"[]", s.Elem(), a.Elem())
	}
}

// record reports whether t is, or holds, a record of store or the API,
// compared by its fields rather than by its name.
func record(t reflect.Type) bool {
	switch t.PkgPath() {
	case reflect.TypeOf(store.Job{}).PkgPath(), reflect.TypeOf(api.Job{}).PkgPath():
		return true
	case "":
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			return record(t.Elem())
		}
	}
	return false
}

func TestConversionsCarryEveryField(t *testing.T) {
	t.Run("Job", func(t *testing.T) {
		var j store.Job
		fill(reflect.ValueOf(&j).Elem())
		sameJSON(t, j, apiJob(j))
		if back := storeJob(apiJob(j)); !reflect.DeepEqual(back, j) {
			t.Errorf("store → API → store: %+v, want %+v", back, j)
		}
	})
	t.Run("NewJob", func(t *testing.T) {
		var j api.NewJob
		fill(reflect.ValueOf(&j).Elem())
		sameJSON(t, j, storeNewJob(j), "Hand")
	})
	t.Run("SubmitResult", func(t *testing.T) {
		var r store.SubmitResult
		fill(reflect.ValueOf(&r).Elem())
		sameJSON(t, r, apiSubmitResult(r))
	})
	t.Run("Limits", func(t *testing.T) {
		var l store.Limits
		fill(reflect.ValueOf(&l).Elem())
		sameJSON(t, l, apiLimits(l))
		var c api.LimitsChange
		fill(reflect.ValueOf(&c).Elem())
		sameJSON(t, c, storeLimitsChange(c))
	})
	t.Run("Schedule", func(t *testing.T) {
		var s store.Schedule
		fill(reflect.ValueOf(&s).Elem())
		sameJSON(t, s, apiSchedule(s))
		if back := storeSchedule(apiSchedule(s)); !reflect.DeepEqual(back, s) {
			t.Errorf("store → API → store: %+v, want %+v", back, s)
		}
	})
	t.Run("Steps", func(t *testing.T) {
		var b api.StepBeginParams
		fill(reflect.ValueOf(&b).Elem())
		sameJSON(t, b, storeStepBegin(b))
		var f api.StepFailParams
		fill(reflect.ValueOf(&f).Elem())
		sameJSON(t, f, storeStepFail(f))
		var s api.StepSleepParams
		fill(reflect.ValueOf(&s).Elem())
		sameJSON(t, s, storeStepSleep(s))
	})
}

// sameJSON compares a record and its conversion by their JSON, which
// names every field; fields only one side has are left out.
func sameJSON(t *testing.T, from, to any, only ...string) {
	t.Helper()
	var a, b map[string]any
	for _, c := range []struct {
		v   any
		out *map[string]any
	}{{from, &a}, {to, &b}} {
		raw, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, c.out); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range only {
		delete(a, f)
		delete(b, f)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("converted %T to %T:\n got %v\nwant %v", from, to, b, a)
	}
}

// fill sets every field of v to a value other than its zero.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Unix(1700000000, 0).UTC()))
		return
	}
	if v.Type() == reflect.TypeOf(json.RawMessage{}) {
		v.SetBytes([]byte(`{"x":1}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Uint8:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

func TestTheAPIsConstantsAreTheStores(t *testing.T) {
	for _, c := range []struct{ api, store any }{
		{api.StatusQueued, store.StatusQueued},
		{api.StatusScheduled, store.StatusScheduled},
		{api.StatusRunning, store.StatusRunning},
		{api.StatusRetrying, store.StatusRetrying},
		{api.StatusCompleted, store.StatusCompleted},
		{api.StatusFailed, store.StatusFailed},
		{api.StatusCancelled, store.StatusCancelled},
		{api.StatusSnoozed, store.StatusSnoozed},
		{api.StatusPending, store.StatusPending},
		{api.ParentFailureCancel, store.ParentFailureCancel},
		{api.ParentFailureRun, store.ParentFailureRun},
		{api.WorkerActive, store.WorkerActive},
		{api.WorkerDraining, store.WorkerDraining},
		{api.WorkerDead, store.WorkerDead},
		{api.WorkerUnregistered, store.WorkerUnregistered},
		{api.MaxLogLines, store.MaxLogLines},
		{api.MaxSteps, store.MaxSteps},
	} {
		if c.api != c.store {
			t.Errorf("the API's %v is the store's %v", c.api, c.store)
		}
	}
	for _, s := range []string{store.StatusQueued, store.StatusRunning, store.StatusCompleted, store.StatusFailed, store.StatusCancelled} {
		if api.IsTerminal(s) != store.IsTerminal(s) {
			t.Errorf("IsTerminal(%q) differs", s)
		}
	}
}
