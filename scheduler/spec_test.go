package scheduler

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	valid := []struct{ cron, tz string }{
		{"*/5 * * * * *", ""},
		{"0 30 2 * * *", "Europe/Paris"},
		{"30 2 * * *", "America/New_York"},
		{"0 9 * * mon-fri", "Asia/Tokyo"},
		{"@hourly", "UTC"},
		{"@daily", "Australia/Lord_Howe"},
		{"@every 10s", ""},
		{"@every 1h30m", ""},
		{"  0 0 29 2 *  ", ""}, // leap days only: still within five years
	}
	for _, tc := range valid {
		if _, err := Parse(tc.cron, tc.tz); err != nil {
			t.Errorf("Parse(%q, %q): %v", tc.cron, tc.tz, err)
		}
	}
	invalid := []struct {
		cron, tz string
		kind     error
		msg      string
	}{
		{"", "", ErrInvalidCron, `cron "" is empty`},
		{"bogus", "", ErrInvalidCron, `cron "bogus" is not valid: expected 5 to 6 fields, found 1: [bogus]`},
		{"0 0 30 2 *", "", ErrInvalidCron, `cron "0 0 30 2 *" never fires`},
		{"* * * * * * *", "", ErrInvalidCron, `cron "* * * * * * *" is not valid: expected 5 to 6 fields, found 7: [* * * * * * *]`},
		{"60 * * * *", "", ErrInvalidCron, `cron "60 * * * *" is not valid: end of range (60) above maximum (59): 60`},
		{"CRON_TZ=UTC", "", ErrInvalidCron, `cron "CRON_TZ=UTC" names a timezone: give it in the timezone field instead`},
		{"TZ=Europe/Paris 0 * * * *", "", ErrInvalidCron, `cron "TZ=Europe/Paris 0 * * * *" names a timezone: give it in the timezone field instead`},
		{"@every 500ms", "", ErrInvalidCron, `cron "@every 500ms" is not valid: @every takes a whole number of seconds, at least 1s`},
		{"@every 1.5s", "", ErrInvalidCron, `cron "@every 1.5s" is not valid: @every takes a whole number of seconds, at least 1s`},
		{"@every -1s", "", ErrInvalidCron, `cron "@every -1s" is not valid: @every takes a whole number of seconds, at least 1s`},
		{"@fortnightly", "", ErrInvalidCron, `cron "@fortnightly" is not valid: unrecognized descriptor: @fortnightly`},
		{"@hourly", "Mars/Olympus_Mons", ErrUnknownTimezone, `timezone "Mars/Olympus_Mons" is unknown: give an IANA zone name such as Europe/Paris`},
		{"@hourly", "Local", ErrUnknownTimezone, `timezone "Local" is unknown: give an IANA zone name such as Europe/Paris`},
		{"@hourly", "../../etc/passwd", ErrUnknownTimezone, `timezone "../../etc/passwd" is unknown: give an IANA zone name such as Europe/Paris`},
	}
	for _, tc := range invalid {
		_, err := Parse(tc.cron, tc.tz)
		if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
			t.Errorf("Parse(%q, %q) = %v, want %v: %s", tc.cron, tc.tz, err, tc.kind, tc.msg)
		}
	}
}

func TestNextReadsTheFieldsInTheTimezone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cron, tz     string
		after, want  string
		wantNextNext string
	}{
		// 02:30 in Paris is 01:30 UTC in winter and 00:30 UTC in summer.
		{"0 30 2 * * *", "Europe/Paris", "2030-01-01T00:00:00Z", "2030-01-01T01:30:00Z", "2030-01-02T01:30:00Z"},
		{"30 2 * * *", "Europe/Paris", "2030-07-01T00:00:00Z", "2030-07-01T00:30:00Z", "2030-07-02T00:30:00Z"},
		{"0 9 * * 1", "America/New_York", "2030-01-01T00:00:00Z", "2030-01-07T14:00:00Z", "2030-01-14T14:00:00Z"},
		// 6 fields with seconds, 5 without.
		{"15 * * * * *", "", "2030-01-01T00:00:00Z", "2030-01-01T00:00:15Z", "2030-01-01T00:01:15Z"},
		{"@every 10s", "Asia/Tokyo", "2030-01-01T00:00:00.5Z", "2030-01-01T00:00:10Z", "2030-01-01T00:00:20Z"},
	}
	for _, tc := range tests {
		sp, err := Parse(tc.cron, tc.tz)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := time.Parse(time.RFC3339Nano, tc.after)
		n := sp.Next(after)
		nn := sp.Next(n)
		if got := n.UTC().Format(time.RFC3339); got != tc.want {
			t.Errorf("%q in %s after %s: %s, want %s", tc.cron, tc.tz, tc.after, got, tc.want)
		}
		if got := nn.UTC().Format(time.RFC3339); got != tc.wantNextNext {
			t.Errorf("%q in %s after %s: then %s, want %s", tc.cron, tc.tz, tc.want, got, tc.wantNextNext)
		}
	}
}

// bruteForce is what plan must answer, worked out the slow way.
func bruteForce(sp *Spec, next, now time.Time, maxCatchup int) ([]time.Time, int64, time.Time) {
	var all []time.Time
	t := next
	for !t.After(now) {
		all = append(all, t)
		t = sp.Next(t)
	}
	keep := min(len(all), max(maxCatchup, 1))
	return all[len(all)-keep:], int64(len(all) - keep), t
}

func TestPlanSubmitsTheMostRecentFiresUpToMaxCatchup(t *testing.T) {
	// Not parallel: it changes maxEnumerate.
	start := time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, cron := range []string{"@every 1s", "@every 7s", "*/3 * * * * *", "0 * * * * *", "@hourly"} {
		sp, err := Parse(cron, "Europe/Paris")
		if err != nil {
			t.Fatal(err)
		}
		next := sp.Next(start)
		for _, down := range []time.Duration{0, 500 * time.Millisecond, 5 * time.Second, 61 * time.Second, 10 * time.Minute, 26 * time.Hour} {
			now := next.Add(down)
			for _, mc := range []int{0, 1, 3, 100} {
				wantFires, wantSkipped, wantAfter := bruteForce(sp, next, now, mc)
				fires, skipped, after := sp.plan(next, now, mc)
				if !slices.EqualFunc(fires, wantFires, time.Time.Equal) || skipped != wantSkipped || !after.Equal(wantAfter) {
					t.Errorf("%q down %v max_catchup %d: fires %v skipped %d next %v; want %v, %d, %v",
						cron, down, mc, fires, skipped, after, wantFires, wantSkipped, wantAfter)
				}

				// In parts, as after a long downtime: the same fires,
				// the same count of skipped ones, over several plans.
				saved := maxEnumerate
				maxEnumerate = 4
				var got []time.Time
				var gotSkipped int64
				t0 := next
				for parts := 0; ; parts++ {
					if parts > len(wantFires)+int(wantSkipped) {
						t.Fatalf("%q: plan makes no progress", cron)
					}
					f, s, a := sp.plan(t0, now, mc)
					got, gotSkipped, t0 = append(got, f...), gotSkipped+s, a
					if a.After(now) {
						break
					}
				}
				maxEnumerate = saved
				if !slices.EqualFunc(got, wantFires, time.Time.Equal) || gotSkipped != wantSkipped || !t0.Equal(wantAfter) {
					t.Errorf("%q down %v max_catchup %d in parts: fires %v skipped %d next %v; want %v, %d, %v",
						cron, down, mc, got, gotSkipped, t0, wantFires, wantSkipped, wantAfter)
				}
			}
		}
	}
}

// FuzzParse checks that no text or timezone makes Parse panic, that its
// errors are the documented ones, and that a spec it accepts moves forward.
func FuzzParse(f *testing.F) {
	for _, seed := range [][2]string{
		{"*/5 * * * * *", ""}, {"30 2 * * *", "Europe/Paris"}, {"@every 10s", ""}, {"@hourly", "UTC"},
		{"0 0 30 2 *", ""}, {"CRON_TZ=UTC", ""}, {"TZ=", ""}, {"CRON_TZ=UTC 0 * * * *", ""},
		{"@every", ""}, {"@every 9999999h", ""}, {"1-5/0 * * * *", ""}, {"*/1000000000000 * * * *", ""},
		{"0 0 0 1 1 *", "America/Sao_Paulo"}, {"0 0 * * 0", "America/Santiago"}, {"? ? ? ? ?", ""},
		{"0 0 12 11,26 * *", "America/Sao_Paulo"}, {"0 30 2 * * *", "America/Los_Angeles"},
	} {
		f.Add(seed[0], seed[1])
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, text, tz string) {
		sp, err := Parse(text, tz)
		if err != nil {
			if !errors.Is(err, ErrInvalidCron) && !errors.Is(err, ErrUnknownTimezone) {
				t.Fatalf("Parse(%q, %q): undocumented error %v", text, tz, err)
			}
			return
		}
		prev := now
		for range 5 {
			n := sp.Next(prev)
			if n.IsZero() {
				return
			}
			if !n.After(prev) {
				t.Fatalf("Parse(%q, %q): Next(%v) = %v does not move forward", text, tz, prev, n)
			}
			prev = n
		}
		first := sp.Next(now)
		fires, skipped, after := sp.plan(first, prev, 3)
		if len(fires) > 3 || skipped < 0 || !after.IsZero() && !after.After(prev) {
			t.Fatalf("Parse(%q, %q): plan gave %d fires, %d skipped, next %v", text, tz, len(fires), skipped, after)
		}
	})
}
