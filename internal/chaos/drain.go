package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// backlog is what the database holds of the acknowledged jobs not yet
// finished: how many, and a digest of their statuses, attempts and
// deliveries, which changes whenever any of them moves (is popped,
// re-queued, retried, finishes).
type backlog struct {
	unfinished int
	digest     string
}

// drainWatch decides when waiting for the acknowledged jobs ends: when
// none is left, or when none of those left has moved for stuckAfter. A
// queue that is long but being worked off keeps the wait going however long
// it takes; only jobs nothing happens to end it.
type drainWatch struct {
	stuckAfter time.Duration
	last       backlog
	movedAt    time.Time
}

// unknown is the backlog before the first look, and while the database
// cannot be read: it counts as nothing moving.
var unknown = backlog{unfinished: -1}

func newDrainWatch(now time.Time, stuckAfter time.Duration) *drainWatch {
	return &drainWatch{stuckAfter: stuckAfter, last: unknown, movedAt: now}
}

// observe takes the backlog seen at now and reports whether the wait is
// over, and if so whether it ended because nothing moved.
func (w *drainWatch) observe(now time.Time, b backlog) (over, stalled bool) {
	if b.unfinished == 0 {
		return true, false
	}
	if b != w.last && b != unknown {
		w.last, w.movedAt = b, now
		return false, false
	}
	if now.Sub(w.movedAt) >= w.stuckAfter {
		return true, true
	}
	return false, false
}

// drain waits for the acknowledged jobs ids to finish, saying every few
// seconds how many are left and how fast they finish, and returns how long
// it waited.
func (r *run) drain(ctx context.Context, conn *pgx.Conn, ids []string) time.Duration {
	start := time.Now()
	w := newDrainWatch(start, r.cfg.StuckAfter)
	lastSaid, leftThen := start.Add(-time.Hour), -1 // the first look is said at once
	for ctx.Err() == nil {
		b, err := backlogOf(ctx, conn, ids)
		if err != nil {
			// The database may be coming back from the last fault; a
			// failed look sees nothing move.
			r.say("looking at the backlog: %v", err)
			b = unknown
		}
		now := time.Now()
		over, stalled := w.observe(now, b)
		if over {
			if stalled && b == unknown {
				r.say("the backlog could not be read for %s", r.cfg.StuckAfter)
			} else if stalled {
				r.say("%d jobs unfinished and none of them moved for %s: calling them stuck", b.unfinished, r.cfg.StuckAfter)
			}
			break
		}
		if now.Sub(lastSaid) >= 5*time.Second && b != unknown {
			rate := ""
			if leftThen >= 0 {
				rate = fmt.Sprintf(", %.0f finished/s", float64(leftThen-b.unfinished)/now.Sub(lastSaid).Seconds())
			}
			r.say("draining: %d unfinished%s", b.unfinished, rate)
			lastSaid, leftThen = now, b.unfinished
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return time.Since(start)
}

// backlogOf reads the backlog of the acknowledged jobs ids.
func backlogOf(ctx context.Context, conn *pgx.Conn, ids []string) (backlog, error) {
	var b backlog
	err := conn.QueryRow(ctx, `
		SELECT count(*), coalesce(md5(string_agg(
			a.id || ':' || coalesce(j.status::text, '-') || ':' || coalesce(j.attempt::text, '-') || ':' || coalesce(j.delivery::text, '-'),
			',' ORDER BY a.id)), '')
		FROM unnest($1::text[]) AS a(id)
		LEFT JOIN jobs_all j ON j.id = a.id
		WHERE j.status IS NULL OR j.status NOT IN ('completed', 'failed', 'cancelled')`, ids).Scan(&b.unfinished, &b.digest)
	return b, err
}
