package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	// The zone database is built in, so that a timezone means the same on
	// every node whatever its system has installed.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Errors of Parse, matched with errors.Is; their text names the input.
var (
	// ErrInvalidCron means the cron text cannot be parsed or never fires.
	ErrInvalidCron = errors.New("invalid cron")
	// ErrUnknownTimezone means the timezone is not an IANA zone name.
	ErrUnknownTimezone = errors.New("unknown timezone")
)

// specError carries a message for people and a sentinel for programs.
type specError struct {
	kind error
	msg  string
}

func (e *specError) Error() string { return e.msg }
func (e *specError) Unwrap() error { return e.kind }

func cronError(text, format string, args ...any) error {
	return &specError{kind: ErrInvalidCron, msg: fmt.Sprintf("cron %q ", text) + fmt.Sprintf(format, args...)}
}

// maxCronLen bounds the cron text; real specs are a few dozen bytes.
const maxCronLen = 256

// parser reads 6 fields with seconds, 5 fields, and descriptors such as
// @hourly and @every 10s. Only robfig/cron's parser is used; firing is
// agq's own.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron schedule read in its timezone.
type Spec struct {
	schedule cron.Schedule
	// every is the period of an @every schedule, 0 for the others.
	every time.Duration
}

// Parse reads cron text in timezone (an IANA name; "" is UTC). Text that
// cannot be parsed or never fires is ErrInvalidCron and an unknown zone
// ErrUnknownTimezone; Parse never panics.
func Parse(text, timezone string) (*Spec, error) {
	loc, err := loadLocation(timezone)
	if err != nil {
		return nil, err
	}
	text = strings.TrimSpace(text)
	switch {
	case text == "":
		return nil, cronError(text, "is empty")
	case len(text) > maxCronLen:
		return nil, &specError{kind: ErrInvalidCron, msg: fmt.Sprintf("cron is longer than %d bytes", maxCronLen)}
	case strings.HasPrefix(text, "CRON_TZ=") || strings.HasPrefix(text, "TZ="):
		return nil, cronError(text, "names a timezone: give it in the timezone field instead")
	}
	sched, err := parseCron(text)
	if err != nil {
		return nil, cronError(text, "is not valid: %s", err)
	}
	sp := &Spec{schedule: sched}
	switch s := sched.(type) {
	case *cron.SpecSchedule:
		s.Location = loc
	case cron.ConstantDelaySchedule:
		// robfig/cron rounds what it cannot do; agq refuses it instead.
		d, _ := time.ParseDuration(strings.TrimPrefix(text, "@every "))
		if d < time.Second || d%time.Second != 0 {
			return nil, cronError(text, "is not valid: @every takes a whole number of seconds, at least 1s")
		}
		sp.every = s.Delay
	}
	if sp.Next(time.Now()).IsZero() {
		return nil, cronError(text, "never fires")
	}
	return sp, nil
}

// parseCron runs robfig/cron's parser, which panics on some inputs.
func parseCron(text string) (sched cron.Schedule, err error) {
	defer func() {
		if p := recover(); p != nil {
			sched, err = nil, fmt.Errorf("cannot be parsed")
		}
	}()
	return parser.Parse(text)
}

// locations caches loaded zones: LoadLocation reads the zone file each time.
var locations sync.Map // name → *time.Location

func loadLocation(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	// "Local" would mean each node's own zone.
	if name == "Local" || len(name) > 64 {
		return nil, &specError{kind: ErrUnknownTimezone, msg: fmt.Sprintf("timezone %q is unknown: give an IANA zone name such as Europe/Paris", name)}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, &specError{kind: ErrUnknownTimezone, msg: fmt.Sprintf("timezone %q is unknown: give an IANA zone name such as Europe/Paris", name)}
	}
	locations.Store(name, loc)
	return loc, nil
}

// Next is the first fire strictly after t, or the zero time when there is
// none within five years.
func (s *Spec) Next(t time.Time) time.Time {
	next := s.schedule.Next(t)
	if next.IsZero() || next.After(t) {
		return next
	}
	// A daylight-saving edge case must not make the schedule stand still.
	next = s.schedule.Next(t.Truncate(time.Second).Add(time.Second))
	if next.After(t) {
		return next
	}
	return time.Time{}
}

// maxEnumerate bounds the fires one plan walks through, so that a long
// downtime of a per-second schedule is caught up in parts rather than in
// one long transaction. A variable for the tests.
var maxEnumerate int64 = 1_000_000

// plan works out a sweep of a schedule whose next fire, next, is not after
// now: every fire from next to now is due; the most recent maxCatchup of
// them are submitted, oldest first, and the older ones are skipped. The
// latest due fire is always submitted: a max_catchup of 0 replays none of
// the older ones, as 1 does.
func (s *Spec) plan(next, now time.Time, maxCatchup int) (fires []time.Time, skipped int64, after time.Time) {
	maxCatchup = max(maxCatchup, 1)
	if s.every > 0 && next.Nanosecond() == 0 {
		return s.planEvery(next, now, maxCatchup)
	}
	// recent holds the last maxCatchup fires seen, as a ring from head.
	recent := make([]time.Time, 0, min(maxCatchup, 1024))
	head := 0
	var total int64
	t := next
	for !t.IsZero() && !t.After(now) {
		if total == maxEnumerate && s.atLeast(t, now, maxCatchup) {
			// None of the fires seen so far is among the last
			// maxCatchup: skip them, and go on from t next time.
			return nil, total, t
		}
		total++
		switch {
		case len(recent) < maxCatchup:
			recent = append(recent, t)
		default:
			recent[head] = t
			head = (head + 1) % maxCatchup
		}
		t = s.Next(t)
	}
	fires = append(recent[head:len(recent):len(recent)], recent[:head]...)
	return fires, total - int64(len(fires)), t
}

// atLeast reports whether n fires fall between t (a fire) and now.
func (s *Spec) atLeast(t, now time.Time, n int) bool {
	for i := 0; i < n; i++ {
		if t.IsZero() || t.After(now) {
			return false
		}
		t = s.Next(t)
	}
	return true
}

// planEvery is plan for @every, by arithmetic: its fires are next + k·every.
func (s *Spec) planEvery(next, now time.Time, maxCatchup int) ([]time.Time, int64, time.Time) {
	total := int64(now.Sub(next)/s.every) + 1
	keep := min(total, int64(maxCatchup))
	fires := make([]time.Time, keep)
	first := total - keep
	for i := range fires {
		fires[i] = next.Add(time.Duration(first+int64(i)) * s.every)
	}
	return fires, first, next.Add(time.Duration(total) * s.every)
}
