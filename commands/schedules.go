package commands

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agq/agq/internal/jsonmsg"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// maxCatchupLimit bounds max_catchup: one sweep may submit that many jobs
// for one schedule.
const maxCatchupLimit = 10000

// scheduleCommands are SCHEDULE.CREATE|GET|LIST|UPDATE|DELETE|PAUSE|RESUME|TRIGGER.
func (s *Server) scheduleCommands() []*Command {
	return []*Command{
		{Name: "schedule.create", Arity: 2, Roles: roleAdmin, Handler: s.cmdScheduleCreate},
		{Name: "schedule.get", Arity: 2, Roles: readers, Handler: s.cmdScheduleGet},
		{Name: "schedule.list", Arity: 1, Roles: readers, Handler: s.cmdScheduleList},
		{Name: "schedule.update", Arity: 3, Roles: roleAdmin, Handler: s.cmdScheduleUpdate},
		{Name: "schedule.delete", Arity: 2, Roles: roleAdmin, Handler: s.cmdScheduleDelete},
		{Name: "schedule.pause", Arity: 2, Roles: roleAdmin, Handler: s.cmdSchedulePause},
		{Name: "schedule.resume", Arity: -2, Roles: roleAdmin, Handler: s.cmdScheduleResume},
		{Name: "schedule.trigger", Arity: 2, Roles: roleAdmin, Handler: s.cmdScheduleTrigger},
	}
}

// scheduleDoc is the SCHEDULE.CREATE and SCHEDULE.UPDATE document; absent
// fields are nil. Unknown fields are refused.
type scheduleDoc struct {
	Name       *string         `json:"name"`
	Cron       *string         `json:"cron"`
	Timezone   *string         `json:"timezone"`
	Queue      *string         `json:"queue"`
	Job        json.RawMessage `json:"job"`
	Enabled    *bool           `json:"enabled"`
	MaxCatchup *int            `json:"max_catchup"`
}

// templateRefused are the JOB.SUBMIT fields a job template may not set,
// with the reason.
var templateRefused = []struct{ field, why string }{
	{"job_id", "each fire's job id is derived from the schedule's name and the fire time"},
	{"run_at", "a fire's job runs at its fire time"},
	{"delay_seconds", "a fire's job runs at its fire time"},
	{"unique_key", "each fire is its own job"},
}

func scheduleError(format string, args ...any) error {
	return resp.Errorf("invalid schedule: %s", fmt.Sprintf(format, args...))
}

func (s *Server) decodeScheduleDoc(raw []byte) (scheduleDoc, error) {
	var doc scheduleDoc
	if int64(len(raw)) > s.opts.MaxPayload {
		return doc, resp.ErrPayloadTooBig
	}
	if !utf8.Valid(raw) {
		return doc, scheduleError("not valid UTF-8")
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return doc, scheduleError("must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return doc, scheduleError("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return doc, scheduleError("trailing data after the JSON object")
	}
	// The job template may be given as "job", as "template", or inline:
	// the JOB.SUBMIT fields next to the schedule's own.
	own, inline := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range fields {
		switch {
		case k == "template":
			own["job"] = v
		case slices.Contains(scheduleFields, k):
			own[k] = v
		case slices.Contains(templateFields, k):
			inline[k] = v
		default:
			return doc, scheduleError("unknown field %q", k)
		}
	}
	if _, both := fields["template"]; both && fields["job"] != nil {
		return doc, scheduleError("give the job template once: job or template")
	}
	if len(inline) > 0 {
		if own["job"] != nil {
			return doc, scheduleError("give the job template once: in job, or as fields of the schedule")
		}
		own["job"], _ = json.Marshal(inline)
	}
	b, _ := json.Marshal(own)
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&doc); err != nil {
		return doc, scheduleError("%s", jsonmsg.Reason(err))
	}
	return doc, nil
}

// scheduleFields are the schedule's own fields; templateFields the
// JOB.SUBMIT fields a template may give inline (and those it may not, so
// that they are refused with their reason).
var (
	scheduleFields = []string{"name", "cron", "timezone", "queue", "job", "enabled", "max_catchup"}
	templateFields = []string{"type", "requires", "plan", "inputs", "payload", "priority", "max_attempts",
		"retry_backoff_seconds", "timeout_seconds", "job_id", "run_at", "delay_seconds", "unique_key", "fair_key", "fair_weight"}
)

// parseTemplate validates a job template as JOB.SUBMIT would and returns
// it with its defaults filled in, and the queue it names, if any.
func (s *Server) parseTemplate(raw json.RawMessage) (records.JobTemplate, string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return records.JobTemplate{}, "", scheduleError("job is missing: give the job each fire submits, with the fields of JOB.SUBMIT")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return records.JobTemplate{}, "", scheduleError("job must be a JSON object")
	}
	if len(fields) == 0 {
		return records.JobTemplate{}, "", scheduleError("job is empty: give the job each fire submits, with the fields of JOB.SUBMIT")
	}
	for _, r := range templateRefused {
		if _, ok := fields[r.field]; ok {
			return records.JobTemplate{}, "", scheduleError("job may not set %s: %s", r.field, r.why)
		}
	}
	j, err := s.parseJob(raw, "ready")
	if errors.Is(err, resp.ErrPayloadTooBig) {
		return records.JobTemplate{}, "", err
	}
	if err != nil {
		return records.JobTemplate{}, "", scheduleError("job: %s", err)
	}
	queue := ""
	if _, ok := fields["queue"]; ok {
		queue = j.Queue
	}
	return records.JobTemplate{
		Type:                j.Type,
		Requires:            j.Requires,
		Plan:                nonNull(j.Plan),
		Inputs:              nonNull(j.Inputs),
		Payload:             nonNull(j.Payload),
		Priority:            j.Priority,
		MaxAttempts:         j.MaxAttempts,
		RetryBackoffSeconds: j.RetryBackoffSeconds,
		TimeoutSeconds:      j.TimeoutSeconds,
		FairKey:             j.FairKey,
		FairWeight:          weightIfNotDefault(j.FairWeight),
	}, queue, nil
}

// weightIfNotDefault is a fair weight as a template keeps it: 0 (left
// out) for the default, 1.
func weightIfNotDefault(w int) int {
	if w == 1 {
		return 0
	}
	return w
}

func nonNull(r json.RawMessage) json.RawMessage {
	if string(r) == "null" {
		return nil
	}
	return r
}

// applyScheduleDoc writes the fields doc gives into sc, validates the
// result, and sets the next fire: from now when the schedule is new, its
// cron or timezone changed, or it was enabled with its next fire passed
// (fires missed while it was disabled are not replayed).
func (s *Server) applyScheduleDoc(doc scheduleDoc, sc *records.Schedule, creating bool, now time.Time) error {
	if doc.Name != nil && *doc.Name != sc.Name {
		if !creating {
			return scheduleError("a schedule cannot be renamed: create the new one and delete this one")
		}
		sc.Name = *doc.Name
	}
	if !names.Schedule(sc.Name) {
		return scheduleError("name must be %s", names.ScheduleRule)
	}
	// A schedule without a next fire (its spec had stopped parsing) gets one.
	retime := creating || sc.NextFireAt == nil
	if doc.Cron != nil {
		c := strings.TrimSpace(*doc.Cron)
		retime = retime || c != sc.Cron
		sc.Cron = c
	}
	if sc.Cron == "" {
		return scheduleError("cron is missing: give 6 fields with seconds, 5 fields, or a descriptor such as @hourly or @every 10s")
	}
	if doc.Timezone != nil {
		tz := cmp.Or(*doc.Timezone, "UTC")
		retime = retime || tz != sc.Timezone
		sc.Timezone = tz
	}
	if doc.MaxCatchup != nil {
		if *doc.MaxCatchup < 0 || *doc.MaxCatchup > maxCatchupLimit {
			return scheduleError("max_catchup must be between 0 and %d", maxCatchupLimit)
		}
		sc.MaxCatchup = *doc.MaxCatchup
	}
	if creating || doc.Job != nil {
		tmpl, jobQueue, err := s.parseTemplate(doc.Job)
		if err != nil {
			return err
		}
		switch {
		case jobQueue == "":
		case doc.Queue != nil && *doc.Queue != jobQueue:
			return scheduleError("queue %q and the job's queue %q differ: give the queue once", *doc.Queue, jobQueue)
		default:
			sc.Queue = jobQueue
		}
		sc.Job = tmpl
	}
	if doc.Queue != nil {
		sc.Queue = *doc.Queue
	}
	sc.Queue = cmp.Or(sc.Queue, "ready")
	if !names.Queue(sc.Queue) {
		return scheduleError("queue must be %s", names.Rule)
	}
	if doc.Enabled != nil {
		if *doc.Enabled && !sc.Enabled && (sc.NextFireAt == nil || !sc.NextFireAt.After(now)) {
			retime = true
		}
		sc.Enabled = *doc.Enabled
	}
	spec, err := s.eng.ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return scheduleError("%s", err)
	}
	if retime {
		next := spec.Next(now)
		sc.NextFireAt = &next
	}
	return nil
}

// scheduleJSON is a schedule as SCHEDULE.GET and SCHEDULE.LIST answer it.
func scheduleJSON(sc records.Schedule) []byte {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	b, _ := json.Marshal(struct {
		Name       string              `json:"name"`
		Cron       string              `json:"cron"`
		Timezone   string              `json:"timezone"`
		Queue      string              `json:"queue"`
		Job        records.JobTemplate `json:"job"`
		Enabled    bool                `json:"enabled"`
		MaxCatchup int                 `json:"max_catchup"`
		NextFireAt *time.Time          `json:"next_fire_at"`
		LastFireAt *time.Time          `json:"last_fire_at"`
		Fires      int64               `json:"fires"`
		Skipped    int64               `json:"skipped"`
		CreatedAt  time.Time           `json:"created_at"`
		UpdatedAt  time.Time           `json:"updated_at"`
		Namespace  string              `json:"namespace"`
	}{sc.Name, sc.Cron, sc.Timezone, sc.Queue, sc.Job, sc.Enabled, sc.MaxCatchup, utc(sc.NextFireAt),
		utc(sc.LastFireAt), sc.Fires, sc.Skipped, sc.CreatedAt.UTC(), sc.UpdatedAt.UTC(), sc.Namespace})
	return b
}

// SCHEDULE.CREATE json
func (s *Server) cmdScheduleCreate(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	doc, err := s.decodeScheduleDoc(args[1])
	if err != nil {
		return nil, err
	}
	sc := records.Schedule{Timezone: "UTC", Enabled: true, MaxCatchup: 100}
	if doc.Name == nil {
		return nil, scheduleError("name is missing")
	}
	if err := s.applyScheduleDoc(doc, &sc, true, time.Now()); err != nil {
		return nil, err
	}
	return okOr(sess.eng.CreateSchedule(ctx, sc))
}

// SCHEDULE.GET name
func (s *Server) cmdScheduleGet(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	sc, err := sess.eng.ScheduleGet(ctx, string(args[1]))
	return jsonOrNil(sc, err, scheduleJSON)
}

// SCHEDULE.LIST
func (s *Server) cmdScheduleList(ctx context.Context, sess *Session, _ [][]byte) (resp.Reply, error) {
	all, err := sess.eng.ScheduleList(ctx)
	if err != nil {
		return nil, err
	}
	return resp.ArrayOf(all, func(sc records.Schedule) resp.Reply { return resp.Bulk(scheduleJSON(sc)) }), nil
}

// SCHEDULE.UPDATE name json
func (s *Server) cmdScheduleUpdate(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := string(args[1])
	doc, err := s.decodeScheduleDoc(args[2])
	if err != nil {
		return nil, err
	}
	err = sess.eng.UpdateSchedule(ctx, name, func(sc *records.Schedule) error {
		return s.applyScheduleDoc(doc, sc, false, time.Now())
	})
	return okOr(err)
}

// SCHEDULE.DELETE name
func (s *Server) cmdScheduleDelete(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	return okOr(sess.eng.DeleteSchedule(ctx, string(args[1])))
}

// SCHEDULE.PAUSE name
func (s *Server) cmdSchedulePause(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	return okOr(sess.eng.PauseSchedule(ctx, string(args[1])))
}

// SCHEDULE.RESUME name [CATCHUP]
func (s *Server) cmdScheduleResume(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := string(args[1])
	catchup := false
	switch {
	case len(args) == 3 && resp.Is(args[2], "CATCHUP"):
		catchup = true
	case len(args) > 2:
		return nil, resp.ErrSyntax
	}
	return okOr(sess.eng.ResumeSchedule(ctx, name, catchup))
}

// SCHEDULE.TRIGGER name — fires the schedule now, whether it is paused or
// not; answers the job's id.
func (s *Server) cmdScheduleTrigger(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id, err := sess.eng.TriggerSchedule(ctx, string(args[1]))
	if err != nil {
		return nil, err
	}
	return resp.BulkString(id), nil
}
