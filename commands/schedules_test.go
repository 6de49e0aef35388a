package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/scheduler"
)

type scheduleView struct {
	Name       string          `json:"name"`
	Cron       string          `json:"cron"`
	Timezone   string          `json:"timezone"`
	Queue      string          `json:"queue"`
	Job        json.RawMessage `json:"job"`
	Enabled    bool            `json:"enabled"`
	MaxCatchup int             `json:"max_catchup"`
	NextFireAt *time.Time      `json:"next_fire_at"`
	LastFireAt *time.Time      `json:"last_fire_at"`
	Fires      int64           `json:"fires"`
	Skipped    int64           `json:"skipped"`
}

func getSchedule(t *testing.T, c *redis.Client, name string) scheduleView {
	t.Helper()
	raw, err := c.Do(context.Background(), "SCHEDULE.GET", name).Text()
	if err != nil {
		t.Fatalf("SCHEDULE.GET %s: %v", name, err)
	}
	var v scheduleView
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("SCHEDULE.GET %s: %q: %v", name, raw, err)
	}
	return v
}

func mustDo(t *testing.T, c *redis.Client, args ...any) any {
	t.Helper()
	v, err := c.Do(context.Background(), args...).Result()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// runScheduler runs a second scheduler against the node's database, beside
// the one the node runs as leader, until the test ends: two schedulers on
// one database, as after a split brain, must still never double a fire.
func runScheduler(t *testing.T, a *agqtest.Agq) {
	t.Helper()
	s := scheduler.New(scheduler.Config{
		Store:    a.Node.Store(),
		Logger:   zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Interval: 100 * time.Millisecond,
	})
	s.Start(context.Background())
	t.Cleanup(s.Stop)
}

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	const def = `{"name":"nightly","cron":"0 30 2 * * *","timezone":"Europe/Paris","queue":"reports",
		"job":{"type":"report","plan":{"tasks":[{"tool":"sort"}]},"payload":{"kind":"daily"}}}`
	before := time.Now()

	t.Run("CreateIsIdempotent", func(t *testing.T) {
		if got := mustDo(t, admin, "SCHEDULE.CREATE", def); got != "OK" {
			t.Fatalf("first create: %v", got)
		}
		// The same definition, spelled differently, is the same schedule.
		same := `{"job":{"payload":{"kind":"daily"},"plan":{"tasks":[{"tool":"sort"}]},"type":"report","max_attempts":3},
			"name":"nightly","queue":"reports","cron":"0 30 2 * * *","timezone":"Europe/Paris","max_catchup":100}`
		if got := mustDo(t, admin, "SCHEDULE.CREATE", same); got != "OK" {
			t.Fatalf("second create: %v", got)
		}
		err := admin.Do(ctx, "SCHEDULE.CREATE", strings.Replace(def, "0 30 2", "0 45 2", 1)).Err()
		if err == nil || err.Error() != "ERR schedule 'nightly' exists with another definition: change it with SCHEDULE.UPDATE" {
			t.Fatalf("create with another cron: %v", err)
		}
	})

	t.Run("GetShowsTheDefinitionWithItsDefaults", func(t *testing.T) {
		v := getSchedule(t, admin, "nightly")
		if v.Cron != "0 30 2 * * *" || v.Timezone != "Europe/Paris" || v.Queue != "reports" || !v.Enabled ||
			v.MaxCatchup != 100 || v.Fires != 0 || v.LastFireAt != nil {
			t.Errorf("schedule %+v", v)
		}
		if v.NextFireAt == nil || !v.NextFireAt.After(before) || v.NextFireAt.After(before.Add(25*time.Hour)) {
			t.Errorf("next fire %v", v.NextFireAt)
		}
		if p, _ := time.LoadLocation("Europe/Paris"); v.NextFireAt.In(p).Format("15:04:05") != "02:30:00" {
			t.Errorf("next fire %v is not 02:30 in Paris", v.NextFireAt)
		}
		want := `{"type":"report","requires":["sort"],"plan":{"tasks":[{"tool":"sort"}]},"payload":{"kind":"daily"},` +
			`"priority":0,"max_attempts":3,"retry_backoff_seconds":1,"timeout_seconds":3600}`
		if string(v.Job) != want {
			t.Errorf("job template\n got %s\nwant %s", v.Job, want)
		}
		if got, err := admin.Do(ctx, "SCHEDULE.GET", "nosuch").Result(); err != redis.Nil {
			t.Errorf("GET of a missing schedule: %v, %v", got, err)
		}
	})

	t.Run("UpdateReplacesTheFieldsGiven", func(t *testing.T) {
		next := getSchedule(t, admin, "nightly").NextFireAt
		mustDo(t, admin, "SCHEDULE.UPDATE", "nightly", `{"max_catchup":5,"job":{"type":"report2"}}`)
		v := getSchedule(t, admin, "nightly")
		if v.MaxCatchup != 5 || v.Cron != "0 30 2 * * *" || v.Queue != "reports" || !v.NextFireAt.Equal(*next) ||
			!strings.Contains(string(v.Job), `"type":"report2"`) {
			t.Errorf("after updating max_catchup and job: %+v", v)
		}
		mustDo(t, admin, "SCHEDULE.UPDATE", "nightly", `{"cron":"@every 1h","timezone":""}`)
		v = getSchedule(t, admin, "nightly")
		if v.Cron != "@every 1h" || v.Timezone != "UTC" || v.NextFireAt.Sub(time.Now()) > time.Hour+time.Second ||
			v.NextFireAt.Sub(time.Now()) < 58*time.Minute {
			t.Errorf("after updating cron: %+v", v)
		}
		err := admin.Do(ctx, "SCHEDULE.UPDATE", "nosuch", `{"max_catchup":1}`).Err()
		if err == nil || err.Error() != "ERR no such schedule 'nosuch'" {
			t.Errorf("update of a missing schedule: %v", err)
		}
	})

	t.Run("PauseResumeAndTrigger", func(t *testing.T) {
		mustDo(t, admin, "SCHEDULE.PAUSE", "nightly")
		mustDo(t, admin, "SCHEDULE.PAUSE", "nightly")
		if v := getSchedule(t, admin, "nightly"); v.Enabled {
			t.Errorf("paused schedule is enabled")
		}
		id := mustDo(t, admin, "SCHEDULE.TRIGGER", "nightly").(string)
		if !regexp.MustCompile(`^sched-nightly-manual-\d{13}$`).MatchString(id) {
			t.Errorf("triggered job id %q", id)
		}
		j := getJob(t, admin, id)
		if j.Status != "queued" {
			t.Errorf("triggered job %+v", j)
		}
		if n := mustDo(t, admin, "LLEN", "queue:reports"); n != int64(1) {
			t.Errorf("LLEN queue:reports = %v", n)
		}
		if v := getSchedule(t, admin, "nightly"); v.Fires != 1 || v.LastFireAt == nil {
			t.Errorf("after a trigger: %+v", v)
		}
		mustDo(t, admin, "SCHEDULE.RESUME", "nightly")
		mustDo(t, admin, "SCHEDULE.RESUME", "nightly", "catchup")
		if v := getSchedule(t, admin, "nightly"); !v.Enabled {
			t.Errorf("resumed schedule is disabled")
		}
		for _, c := range [][]any{{"SCHEDULE.TRIGGER", "nosuch"}, {"SCHEDULE.PAUSE", "nosuch"}, {"SCHEDULE.RESUME", "nosuch"}} {
			if err := admin.Do(ctx, c...).Err(); err == nil || err.Error() != "ERR no such schedule 'nosuch'" {
				t.Errorf("%v: %v", c, err)
			}
		}
		if err := admin.Do(ctx, "SCHEDULE.RESUME", "nightly", "NOW").Err(); err == nil || err.Error() != "ERR syntax error" {
			t.Errorf("RESUME with a bad option: %v", err)
		}
	})

	t.Run("ProducersMayReadOnly", func(t *testing.T) {
		key := a.CreateKey(t, "producer", "sched-reader")
		p := a.Client(t, redis.Options{Username: "sched-reader", Password: key})
		if v := getSchedule(t, p, "nightly"); v.Name != "nightly" {
			t.Errorf("producer GET: %+v", v)
		}
		if l, err := p.Do(ctx, "SCHEDULE.LIST").StringSlice(); err != nil || len(l) != 1 {
			t.Errorf("producer LIST: %v, %v", l, err)
		}
		err := p.Do(ctx, "SCHEDULE.PAUSE", "nightly").Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("producer PAUSE: %v", err)
		}
	})

	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		mustDo(t, admin, "SCHEDULE.CREATE", `{"name":"other","cron":"@daily","job":{"type":"x"}}`)
		l, err := admin.Do(ctx, "SCHEDULE.LIST").StringSlice()
		if err != nil || len(l) != 2 || !strings.HasPrefix(l[0], `{"name":"nightly"`) || !strings.HasPrefix(l[1], `{"name":"other"`) {
			t.Fatalf("LIST: %v, %v", l, err)
		}
		mustDo(t, admin, "SCHEDULE.DELETE", "nightly")
		mustDo(t, admin, "SCHEDULE.DELETE", "nightly")
		if err := admin.Do(ctx, "SCHEDULE.GET", "nightly").Err(); err != redis.Nil {
			t.Errorf("GET after DELETE: %v", err)
		}
		if n := mustDo(t, admin, "LLEN", "queue:reports"); n != int64(1) {
			t.Errorf("the fired job went with its schedule: LLEN %v", n)
		}
	})
}

func TestScheduleBadInputIsAnErrorReply(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	ctx := context.Background()
	mustDo(t, admin, "SCHEDULE.CREATE", `{"name":"exists","cron":"@hourly","job":{"type":"x"}}`)
	tests := []struct {
		name string
		args []any
		want string
	}{
		{"BadCron", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"every day","job":{"type":"x"}}`},
			`ERR invalid schedule: cron "every day" is not valid: expected 5 to 6 fields, found 2: [every day]`},
		{"ImpossibleCron", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"0 0 30 2 *","job":{"type":"x"}}`},
			`ERR invalid schedule: cron "0 0 30 2 *" never fires`},
		{"CronThatPanicsTheParser", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"CRON_TZ=UTC","job":{"type":"x"}}`},
			`ERR invalid schedule: cron "CRON_TZ=UTC" names a timezone: give it in the timezone field instead`},
		{"SubSecondEvery", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@every 100ms","job":{"type":"x"}}`},
			`ERR invalid schedule: cron "@every 100ms" is not valid: @every takes a whole number of seconds, at least 1s`},
		{"UnknownTimezone", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","timezone":"Moon/Tranquility","job":{"type":"x"}}`},
			`ERR invalid schedule: timezone "Moon/Tranquility" is unknown: give an IANA zone name such as Europe/Paris`},
		{"EmptyTemplate", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{}}`},
			`ERR invalid schedule: job is empty: give the job each fire submits, with the fields of JOB.SUBMIT`},
		{"MissingTemplate", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly"}`},
			`ERR invalid schedule: job is missing: give the job each fire submits, with the fields of JOB.SUBMIT`},
		{"TemplateNotAnObject", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":"report"}`},
			`ERR invalid schedule: job must be a JSON object`},
		{"TemplateWithJobID", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{"job_id":"x"}}`},
			`ERR invalid schedule: job may not set job_id: each fire's job id is derived from the schedule's name and the fire time`},
		{"TemplateWithDelay", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{"type":"x","delay_seconds":5}}`},
			`ERR invalid schedule: job may not set delay_seconds: a fire's job runs at its fire time`},
		{"TemplateUnknownField", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{"type":"x","colour":"blue"}}`},
			`ERR invalid schedule: job: unknown field "colour"`},
		{"TemplateBadValue", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{"type":"x","max_attempts":0}}`},
			`ERR invalid schedule: job: max_attempts must be between 1 and 1000`},
		{"TwoQueues", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","queue":"a","job":{"type":"x","queue":"b"}}`},
			`ERR invalid schedule: queue "a" and the job's queue "b" differ: give the queue once`},
		{"BadQueue", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","queue":"a b","job":{"type":"x"}}`},
			`ERR invalid schedule: queue must be 1-128 letters, digits, '_', '-' or '.'`},
		{"MissingName", []any{"SCHEDULE.CREATE", `{"cron":"@hourly","job":{"type":"x"}}`},
			`ERR invalid schedule: name is missing`},
		{"BadName", []any{"SCHEDULE.CREATE", `{"name":"a/b","cron":"@hourly","job":{"type":"x"}}`},
			`ERR invalid schedule: name must be 1-64 letters, digits, '_', '-' or '.'`},
		{"MissingCron", []any{"SCHEDULE.CREATE", `{"name":"s","job":{"type":"x"}}`},
			`ERR invalid schedule: cron is missing: give 6 fields with seconds, 5 fields, or a descriptor such as @hourly or @every 10s`},
		{"NegativeCatchup", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","max_catchup":-1,"job":{"type":"x"}}`},
			`ERR invalid schedule: max_catchup must be between 0 and 10000`},
		{"UnknownField", []any{"SCHEDULE.CREATE", `{"name":"s","cron":"@hourly","job":{"type":"x"},"every":"day"}`},
			`ERR invalid schedule: unknown field "every"`},
		{"NotJSON", []any{"SCHEDULE.CREATE", `{"name":`}, `ERR invalid schedule: unexpected EOF`},
		{"NotAnObject", []any{"SCHEDULE.CREATE", `["name"]`}, `ERR invalid schedule: must be a JSON object`},
		{"WrongType", []any{"SCHEDULE.CREATE", `{"name":"s","cron":5}`},
			`ERR invalid schedule: cron must be a string, not number`},
		{"NotUTF8", []any{"SCHEDULE.CREATE", "{\"name\":\"s\xff\"}"}, `ERR invalid schedule: not valid UTF-8`},
		{"UpdateBadCron", []any{"SCHEDULE.UPDATE", "exists", `{"cron":"61 * * * *"}`},
			`ERR invalid schedule: cron "61 * * * *" is not valid: end of range (61) above maximum (59): 61`},
		{"UpdateRename", []any{"SCHEDULE.UPDATE", "exists", `{"name":"other"}`},
			`ERR invalid schedule: a schedule cannot be renamed: create the new one and delete this one`},
		{"UpdateEmptyTemplate", []any{"SCHEDULE.UPDATE", "exists", `{"job":{}}`},
			`ERR invalid schedule: job is empty: give the job each fire submits, with the fields of JOB.SUBMIT`},
		{"WrongArity", []any{"SCHEDULE.CREATE"}, `ERR wrong number of arguments for 'schedule.create' command`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := admin.Do(ctx, tc.args...).Err()
			if err == nil || err.Error() != tc.want {
				t.Errorf("%v\n got %v\nwant %s", tc.args, err, tc.want)
			}
		})
	}
	// The server kept serving, and nothing was half-done.
	if got := mustDo(t, admin, "PING"); got != "PONG" {
		t.Fatalf("PING after bad input: %v", got)
	}
	if v := getSchedule(t, admin, "exists"); v.Cron != "@hourly" || v.Name != "exists" {
		t.Errorf("a refused update changed the schedule: %+v", v)
	}
	if l, err := admin.Do(ctx, "SCHEDULE.LIST").StringSlice(); err != nil || len(l) != 1 {
		t.Errorf("LIST after bad input: %v, %v", l, err)
	}
}

// firedSeconds returns the fire times (unix seconds) of the jobs of the
// schedule name found in queue, sorted, checking their ids.
func firedSeconds(t *testing.T, c *redis.Client, queue, name string) []int64 {
	t.Helper()
	res, err := c.Do(context.Background(), "JOB.LIST", "QUEUE", queue, "LIMIT", "1000").Slice()
	if err != nil {
		t.Fatalf("JOB.LIST: %v", err)
	}
	idRE := regexp.MustCompile(`^sched-` + regexp.QuoteMeta(name) + `-(\d+)$`)
	var secs []int64
	for _, raw := range res[1].([]any) {
		var j struct {
			ID   string `json:"job_id"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(raw.(string)), &j); err != nil {
			t.Fatal(err)
		}
		m := idRE.FindStringSubmatch(j.ID)
		if m == nil || j.Type != "tick" {
			t.Fatalf("job %s (type %q) in queue %s is not a fire of %s", j.ID, j.Type, queue, name)
		}
		s, _ := strconv.ParseInt(m[1], 10, 64)
		secs = append(secs, s)
	}
	slices.Sort(secs)
	return secs
}

func TestSchedulesFireThroughTheServer(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	runScheduler(t, a)
	created := time.Now().Unix()
	mustDo(t, admin, "SCHEDULE.CREATE", `{"name":"ticker","cron":"@every 1s","queue":"ticks","job":{"type":"tick"}}`)

	agqtest.Eventually(t, 10*time.Second, func() error {
		if n := len(firedSeconds(t, admin, "ticks", "ticker")); n < 3 {
			return fmt.Errorf("%d jobs so far", n)
		}
		return nil
	})
	mustDo(t, admin, "SCHEDULE.PAUSE", "ticker")
	secs := firedSeconds(t, admin, "ticks", "ticker")
	for i, s := range secs {
		if s <= created || i > 0 && s != secs[i-1]+1 {
			t.Fatalf("fire times %v: want one per second after %d", secs, created)
		}
	}
	if v := getSchedule(t, admin, "ticker"); v.Fires != int64(len(secs)) || v.LastFireAt.Unix() != secs[len(secs)-1] {
		t.Errorf("schedule counts %d fires, last %v; jobs %v", v.Fires, v.LastFireAt, secs)
	}
}

func TestResumeReplaysThePausedPeriodOnlyWithCatchup(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	for _, name := range []string{"skip", "replay"} {
		mustDo(t, admin, "SCHEDULE.CREATE",
			`{"name":"`+name+`","cron":"@every 1s","queue":"`+name+`","enabled":false,"job":{"type":"tick"}}`)
	}
	// Both stay paused for three fire periods (no scheduler runs yet).
	paused := time.Now()
	agqtest.Eventually(t, 10*time.Second, func() error {
		if time.Since(paused) < 3*time.Second {
			return fmt.Errorf("paused for %v", time.Since(paused))
		}
		return nil
	})
	resumed := time.Now().Unix()
	mustDo(t, admin, "SCHEDULE.RESUME", "skip")
	mustDo(t, admin, "SCHEDULE.RESUME", "replay", "CATCHUP")
	runScheduler(t, a)

	agqtest.Eventually(t, 10*time.Second, func() error {
		skip, replay := firedSeconds(t, admin, "skip", "skip"), firedSeconds(t, admin, "replay", "replay")
		if len(skip) == 0 || len(replay) < 3 || replay[0] >= resumed {
			return fmt.Errorf("skip fired %v, replay fired %v", skip, replay)
		}
		return nil
	})
	if skip := firedSeconds(t, admin, "skip", "skip"); skip[0] <= resumed {
		t.Errorf("resumed without CATCHUP, yet fires at %v replayed the paused period (resumed at %d)", skip, resumed)
	}
}

func TestTheJobTemplateMayBeGivenInline(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	admin := a.Admin(t)
	for _, doc := range []string{
		`{"name":"nested","cron":"@hourly","queue":"reports","job":{"type":"report","payload":{"n":1}}}`,
		`{"name":"aliased","cron":"@hourly","queue":"reports","template":{"type":"report","payload":{"n":1}}}`,
		`{"name":"inline","cron":"@hourly","queue":"reports","type":"report","payload":{"n":1}}`,
	} {
		mustDo(t, admin, "SCHEDULE.CREATE", doc)
	}
	for _, name := range []string{"nested", "aliased", "inline"} {
		if v := getSchedule(t, admin, name); !strings.Contains(string(v.Job), `"type":"report"`) || v.Queue != "reports" {
			t.Errorf("schedule %s: %+v", name, v)
		}
	}
	for _, doc := range []string{
		`{"name":"twice","cron":"@hourly","job":{"type":"a"},"type":"b"}`,
		`{"name":"odd","cron":"@hourly","type":"a","colour":"blue"}`,
	} {
		if err := admin.Do(ctxT(t), "SCHEDULE.CREATE", doc).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR invalid schedule: ") {
			t.Errorf("%s: %v", doc, err)
		}
	}
}
