package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agq/agq/engine/api"
)

// maxBulk bounds the jobs one "retry all shown" may name: one page.
const maxBulk = pageSize

// action runs one operation from a form, through the same engine methods
// the RESP commands call, and sends the browser back where it came from
// with the outcome. Only admins may act; a viewer's session is refused.
func (d *Dashboard) action(w http.ResponseWriter, r *http.Request, sess session) {
	if !sess.canAct() {
		http.Error(w, "this key may only view: sign in with an admin key to act", http.StatusForbidden)
		return
	}
	name := r.PathValue("name")
	if name == "retry-many" {
		d.retryMany(w, r, sess)
		return
	}
	act, ok := actions[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	notice, err := act(r.Context(), sess.eng, r.PostFormValue("target"))
	d.views.of(sess.view).invalidate()
	d.back(w, r, notice, d.actionError(name, err))
}

// operation is what a form may ask of one job, queue, worker or schedule,
// its target: it runs the engine method the RESP command runs, and says
// what it did.
type operation func(ctx context.Context, eng api.Engine, target string) (notice string, err error)

// actions are the operations by the name a form gives.
var actions = map[string]operation{
	"retry": func(ctx context.Context, eng api.Engine, id string) (string, error) {
		return "Job " + id + " is queued again.", eng.RetryJob(ctx, id)
	},
	"cancel": func(ctx context.Context, eng api.Engine, id string) (string, error) {
		return "Job " + id + " is cancelled (a running job's worker is told to stop).", eng.CancelJob(ctx, id)
	},
	"pause-queue":  pauseQueue(true),
	"resume-queue": pauseQueue(false),
	"drain": func(ctx context.Context, eng api.Engine, id string) (string, error) {
		return "Worker " + id + " is draining: it takes no new jobs.", eng.DrainWorker(ctx, id)
	},
	"pause-schedule": func(ctx context.Context, eng api.Engine, name string) (string, error) {
		return "Schedule " + name + " is paused.", eng.PauseSchedule(ctx, name)
	},
	"resume-schedule": func(ctx context.Context, eng api.Engine, name string) (string, error) {
		return "Schedule " + name + " is resumed.", eng.ResumeSchedule(ctx, name, false)
	},
	"trigger-schedule": func(ctx context.Context, eng api.Engine, name string) (string, error) {
		id, err := eng.TriggerSchedule(ctx, name)
		return "Schedule " + name + " fired job " + id + ".", err
	},
}

// pauseQueue pauses a queue, or resumes it.
func pauseQueue(paused bool) operation {
	done := map[bool]string{true: "paused", false: "resumed"}[paused]
	return func(ctx context.Context, eng api.Engine, queue string) (string, error) {
		return "Queue " + queue + " is " + done + ".", eng.PauseQueue(ctx, queue, paused)
	}
}

// retryMany retries the failed jobs a page showed: first a confirmation
// page naming how many, then, confirmed, each one as JOB.RETRY would.
func (d *Dashboard) retryMany(w http.ResponseWriter, r *http.Request, sess session) {
	ids := r.PostForm["id"]
	if len(ids) == 0 || len(ids) > maxBulk {
		http.Error(w, fmt.Sprintf("name between 1 and %d jobs", maxBulk), http.StatusBadRequest)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		d.render(w, r, http.StatusOK, "confirm", &sess, pageData{Title: "Retry failed jobs", Nav: "failed",
			Data: map[string]any{"IDs": ids, "Back": d.safeBack(r)}})
		return
	}
	done, failed := 0, []string{}
	for _, id := range ids {
		if err := sess.eng.RetryJob(r.Context(), id); err != nil {
			failed = append(failed, d.actionError("retry", err))
			continue
		}
		done++
	}
	d.views.of(sess.view).invalidate()
	notice := fmt.Sprintf("%d of %d jobs are queued again.", done, len(ids))
	errText := ""
	if len(failed) > 0 {
		errText = fmt.Sprintf("%d could not be retried: %s", len(failed), strings.Join(failed[:min(3, len(failed))], "; "))
	}
	d.back(w, r, notice, errText)
}

// actionError words an operation's error: a command's own error reply
// is shown as redis-cli would show it, anything else is logged.
func (d *Dashboard) actionError(name string, err error) string {
	if err == nil {
		return ""
	}
	if text, ok := d.cfg.Explain(err); ok {
		return text
	}
	if err == context.Canceled {
		return "cancelled"
	}
	d.log.Warn().Err(err).Str("action", name).Msg("dashboard: action failed")
	return "the database is unavailable; try again"
}

// back redirects to the page the form was on, with the outcome.
func (d *Dashboard) back(w http.ResponseWriter, r *http.Request, notice, errText string) {
	u, _ := url.Parse(d.safeBack(r))
	q := u.Query()
	q.Del("notice")
	q.Del("error")
	if errText != "" {
		q.Set("error", errText)
	} else {
		q.Set("notice", notice)
	}
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// safeBack is the form's "back" path when it is one of the dashboard's
// own (never another site), else the overview.
func (d *Dashboard) safeBack(r *http.Request) string {
	b := r.PostFormValue("back")
	u, err := url.Parse(b)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, d.prefix) || strings.HasPrefix(b, "//") {
		return d.prefix
	}
	return u.Path + "?" + u.RawQuery
}
