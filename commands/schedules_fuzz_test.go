package commands

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agq/agq/engine"
	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
	"github.com/agq/agq/scheduler"
)

// cronParser is the engine as far as applying a schedule document asks it:
// it parses cron texts and reads jobs as the engine does.
type cronParser struct{ api.Engine }

func (cronParser) NewJob(spec records.JobSpec, defaultQueue string) (records.NewJob, error) {
	return engine.JobRules{MaxAttempts: 3, JobTimeout: time.Hour}.NewJob(spec, defaultQueue)
}

func (cronParser) ParseCron(text, timezone string) (records.CronSpec, error) {
	spec, err := scheduler.Parse(text, timezone)
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// FuzzScheduleDoc feeds SCHEDULE.CREATE and SCHEDULE.UPDATE documents to
// their decoder and validation: whatever the input, the answer is an error
// reply or a schedule that can fire, never a panic.
func FuzzScheduleDoc(f *testing.F) {
	for _, seed := range []string{
		`{"name":"nightly","cron":"0 30 2 * * *","timezone":"Europe/Paris","queue":"reports","job":{"type":"report","plan":{"tasks":[{"tool":"sort"}]}}}`,
		`{"name":"t","cron":"@every 1s","job":{"type":"x","queue":"q"},"enabled":false,"max_catchup":0}`,
		`{"name":"t","cron":"CRON_TZ=UTC","job":{"type":"x"}}`,
		`{"name":"t","cron":"0 0 30 2 *","job":{}}`,
		`{"cron":"@daily","timezone":"","job":null,"enabled":true}`,
		`{"job":{"job_id":"x","run_at":"2030-01-01T00:00:00Z"}}`,
		`{"max_catchup":-1}`, `[]`, `null`, `{"name":"a"} {}`, "{\"name\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	s := &Server{eng: cronParser{}, opts: Options{MaxPayload: 1 << 16}}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	existing := records.Schedule{Name: "existing", Cron: "@hourly", Timezone: "UTC", Queue: "ready", Enabled: true,
		MaxCatchup: 100, Job: records.JobTemplate{Type: "x", Requires: []string{"x"}, MaxAttempts: 3, TimeoutSeconds: 60}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := s.decodeScheduleDoc(raw)
		if err != nil {
			if _, ok := resp.AsError(err); !ok {
				t.Fatalf("decoding %q: %v is not an error reply", raw, err)
			}
			return
		}
		for _, creating := range []bool{true, false} {
			sc := existing
			if creating {
				if doc.Name == nil {
					continue
				}
				sc = records.Schedule{Timezone: "UTC", Enabled: true, MaxCatchup: 100}
			}
			if err := s.applyScheduleDoc(doc, &sc, creating, now); err != nil {
				if _, ok := resp.AsError(err); !ok {
					t.Fatalf("applying %q: %v is not an error reply", raw, err)
				}
				continue
			}
			if _, err := scheduler.Parse(sc.Cron, sc.Timezone); err != nil {
				t.Fatalf("%q was accepted with a cron that does not parse: %v", raw, err)
			}
			if sc.NextFireAt == nil || !sc.NextFireAt.After(now) && creating {
				t.Fatalf("%q: next fire %v", raw, sc.NextFireAt)
			}
			if !names.Schedule(sc.Name) || !names.Queue(sc.Queue) ||
				sc.MaxCatchup < 0 || sc.MaxCatchup > maxCatchupLimit || sc.Job.MaxAttempts < 1 {
				t.Fatalf("%q was accepted as %+v", raw, sc)
			}
			if _, err := json.Marshal(sc.Job); err != nil {
				t.Fatalf("%q: the template does not encode: %v", raw, err)
			}
		}
	})
}
