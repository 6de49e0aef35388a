package dashboard

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/agq/agq/records"
)

// pageSize is the rows of one page of jobs or workers.
const pageSize = 50

// queueRow is one queue on the overview.
type queueRow struct {
	records.QueueSummary
	Waiting int64 // queued and scheduled
}

type overviewData struct {
	Queues   []queueRow
	Workers  map[string]int64
	Running  []records.Job
	Leader   string
	Since    time.Time
	IsLeader bool
	NodeID   string
	Chart    template.HTML
	Done     int64 // completed in the chart's hour
	Failed   int64
}

// overviewPage: every queue's counts, the last hour's work, workers by
// state, the leader and the running jobs. Loaded at most every two seconds
// however many pages are open.
func (d *Dashboard) overviewPage(w http.ResponseWriter, r *http.Request, sess session) {
	data, err := d.views.of(sess.view).overview.get(func() (overviewData, error) {
		var o overviewData
		qs, err := d.queueSummaries(r, sess)
		if err != nil {
			return o, err
		}
		for _, q := range qs {
			o.Queues = append(o.Queues, queueRow{QueueSummary: q, Waiting: min(countCap, q.Counts[records.StatusQueued]+q.Counts[records.StatusScheduled])})
		}
		if o.Workers, err = sess.eng.WorkerCounts(r.Context()); err != nil {
			return o, err
		}
		if o.Running, err = sess.eng.RunningJobs(r.Context(), 20); err != nil {
			return o, err
		}
		o.Leader, o.Since, err = sess.eng.Leader(r.Context())
		if err != nil && !errors.Is(err, records.ErrNotFound) {
			return o, err
		}
		o.NodeID, o.IsLeader = d.cfg.NodeID, d.cfg.IsLeader()
		minutes, err := d.views.of(sess.view).chart.get(r.Context(), sess.eng)
		if err != nil {
			return o, err
		}
		for _, m := range minutes {
			o.Done += m.Completed
			o.Failed += m.Failed
		}
		o.Chart = chartSVG(minutes)
		return o, nil
	})
	if err != nil {
		d.fail(w, "overview", err)
		return
	}
	d.render(w, r, http.StatusOK, "overview", &sess, pageData{Title: "Overview", Nav: "overview", Refresh: 2, Data: data})
}

// queueSummaries are every queue's capped counts, shared by the overview
// and the queue pages for a couple of seconds.
func (d *Dashboard) queueSummaries(r *http.Request, sess session) ([]records.QueueSummary, error) {
	return d.views.of(sess.view).summaries.get(func() ([]records.QueueSummary, error) {
		return sess.eng.QueueSummaries(r.Context(), 500, countCap)
	})
}

// fairKeysShown bounds the fair keys a queue page lists.
const fairKeysShown = 20

// queueStatuses are the queue page's tabs.
var queueStatuses = records.Statuses

type queueData struct {
	Name     string
	Exists   bool
	Paused   bool
	Counts   map[string]int64
	Statuses []string
	Status   string
	Jobs     []records.Job
	// Keys are the fair keys with the largest backlogs (none: the queue's
	// jobs name no key).
	Keys   []records.FairKeyLoad
	Before string
	Next   string // the cursor of the next page, "" on the last
}

func (d *Dashboard) queuePage(w http.ResponseWriter, r *http.Request, sess session) {
	q := r.URL.Query()
	data := queueData{Name: q.Get("name"), Status: q.Get("status"), Before: q.Get("before"), Statuses: queueStatuses}
	if data.Status == "" {
		data.Status = records.StatusQueued
	}
	known := false
	for _, s := range queueStatuses {
		known = known || s == data.Status
	}
	if !known {
		http.Error(w, "unknown status", http.StatusBadRequest)
		return
	}
	all, err := d.queueSummaries(r, sess)
	if err != nil {
		d.fail(w, "queue", err)
		return
	}
	for _, qs := range all {
		if qs.Name == data.Name {
			data.Exists, data.Paused, data.Counts = true, qs.Paused, qs.Counts
		}
	}
	if !data.Exists {
		d.render(w, r, http.StatusNotFound, "notfound", &sess, pageData{Title: "No such queue", Data: "queue " + data.Name})
		return
	}
	data.Jobs, err = sess.eng.QueueJobs(r.Context(), records.QueueJobsParams{Queue: data.Name, Status: data.Status, Before: data.Before, Limit: pageSize})
	if err != nil {
		d.fail(w, "queue", err)
		return
	}
	if len(data.Jobs) == pageSize {
		data.Next = data.Jobs[len(data.Jobs)-1].ID
	}
	if data.Keys, err = sess.eng.QueueFairKeys(r.Context(), data.Name, fairKeysShown); err != nil {
		d.fail(w, "queue", err)
		return
	}
	refresh := 0
	if data.Before == "" {
		refresh = 3 // the newest page follows the queue; older pages stay put
	}
	d.render(w, r, http.StatusOK, "queue", &sess, pageData{Title: "Queue " + data.Name, Nav: "overview", Refresh: refresh, Data: data})
}

// jobError is one entry of a job's error history.
type jobError struct {
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
	At      string `json:"at"`
}

type jobData struct {
	Job     records.Job
	Errors  []jobError
	Logs    []string
	Steps   []records.Step
	More    bool // the job has more steps than the page lists
	Signals []records.Signal
	// MoreSignals: the page lists the first ones only.
	MoreSignals bool
	relativesData
	Terminal bool
	Retry    bool // failed or cancelled: JOB.RETRY applies
}

// jobSignalsShown bounds the signals a job page lists.
const jobSignalsShown = 100

// jobStepsShown bounds the steps a job page lists.
const jobStepsShown = 200

func (d *Dashboard) jobPage(w http.ResponseWriter, r *http.Request, sess session) {
	id := r.URL.Query().Get("id")
	j, err := sess.eng.JobGet(r.Context(), id)
	if errors.Is(err, records.ErrNotFound) {
		d.render(w, r, http.StatusNotFound, "notfound", &sess, pageData{Title: "No such job", Data: "job " + id})
		return
	}
	if err != nil {
		d.fail(w, "job", err)
		return
	}
	data := jobData{Job: j, Terminal: records.IsTerminal(j.Status),
		Retry: j.Status == records.StatusFailed || j.Status == records.StatusCancelled}
	_ = json.Unmarshal(j.Errors, &data.Errors)
	if logs, _, err := sess.eng.JobLogs(r.Context(), id, 0); err == nil {
		data.Logs = logs
	}
	if steps, err := sess.eng.JobSteps(r.Context(), records.JobStepsParams{JobID: id, Limit: jobStepsShown + 1}); err == nil {
		data.Steps, data.More = steps[:min(len(steps), jobStepsShown)], len(steps) > jobStepsShown
	}
	if sigs, err := sess.eng.JobSignals(r.Context(), id, jobSignalsShown+1); err == nil {
		data.Signals, data.MoreSignals = sigs[:min(len(sigs), jobSignalsShown)], len(sigs) > jobSignalsShown
	}
	d.relatives(r.Context(), sess.eng, &data.relativesData, j, r.URL.Query())
	refresh := 2
	if data.Terminal {
		refresh = 0
	}
	d.render(w, r, http.StatusOK, "job", &sess, pageData{Title: "Job " + id, Refresh: refresh, Data: data})
}

type failedData struct {
	Jobs      []records.Job
	NextT     string
	NextID    string
	FirstPage bool
}

func (d *Dashboard) failedPage(w http.ResponseWriter, r *http.Request, sess session) {
	q := r.URL.Query()
	p := records.FailedJobsParams{BeforeID: q.Get("before_id"), Limit: pageSize}
	if t := q.Get("before_t"); t != "" {
		var err error
		if p.BeforeFinished, err = time.Parse(time.RFC3339Nano, t); err != nil {
			http.Error(w, "bad before_t", http.StatusBadRequest)
			return
		}
	}
	jobs, err := sess.eng.FailedJobs(r.Context(), p)
	if err != nil {
		d.fail(w, "failed", err)
		return
	}
	data := failedData{Jobs: jobs, FirstPage: p.BeforeFinished.IsZero()}
	if len(jobs) == pageSize && jobs[len(jobs)-1].FinishedAt != nil {
		last := jobs[len(jobs)-1]
		data.NextT, data.NextID = last.FinishedAt.UTC().Format(time.RFC3339Nano), last.ID
	}
	d.render(w, r, http.StatusOK, "failed", &sess, pageData{Title: "Failed jobs", Nav: "failed", Data: data})
}

type workerRow struct {
	records.Worker
	Stats map[string]any
	Jobs  []string
}

type workersData struct {
	State   string
	States  []string
	Counts  map[string]int64
	Workers []workerRow
	After   string
	Next    string
}

func (d *Dashboard) workersPage(w http.ResponseWriter, r *http.Request, sess session) {
	q := r.URL.Query()
	data := workersData{State: q.Get("state"), After: q.Get("after"),
		States: []string{"live", records.WorkerDead, records.WorkerUnregistered, "all"}}
	p := records.WorkerPageParams{After: data.After, Limit: pageSize}
	switch data.State {
	case "", "live":
		data.State, p.Live = "live", true
	case records.WorkerDead, records.WorkerUnregistered:
		p.State = data.State
	case "all":
	default:
		http.Error(w, "unknown state", http.StatusBadRequest)
		return
	}
	workers, err := sess.eng.WorkerPage(r.Context(), p)
	if err == nil {
		data.Counts, err = sess.eng.WorkerCounts(r.Context())
	}
	var held map[string][]string
	if err == nil && len(workers) > 0 {
		ids := make([]string, len(workers))
		for i, wk := range workers {
			ids[i] = wk.ID
		}
		held, err = sess.eng.WorkersHeldJobs(r.Context(), ids, 20)
	}
	if err != nil {
		d.fail(w, "workers", err)
		return
	}
	for _, wk := range workers {
		row := workerRow{Worker: wk, Jobs: held[wk.ID]}
		_ = json.Unmarshal(wk.Stats, &row.Stats)
		data.Workers = append(data.Workers, row)
	}
	if len(workers) == pageSize {
		data.Next = workers[len(workers)-1].ID
	}
	d.render(w, r, http.StatusOK, "workers", &sess, pageData{Title: "Workers", Nav: "workers", Refresh: 3, Data: data})
}

func (d *Dashboard) schedulesPage(w http.ResponseWriter, r *http.Request, sess session) {
	all, err := sess.eng.ScheduleList(r.Context())
	if err != nil {
		d.fail(w, "schedules", err)
		return
	}
	d.render(w, r, http.StatusOK, "schedules", &sess, pageData{Title: "Schedules", Nav: "schedules", Refresh: 5, Data: all})
}

// search finds a job by its id.
func (d *Dashboard) search(w http.ResponseWriter, r *http.Request, sess session) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	if _, err := sess.eng.JobGet(r.Context(), id); err == nil {
		http.Redirect(w, r, d.prefix+"job"+query("id", id), http.StatusSeeOther)
		return
	} else if !errors.Is(err, records.ErrNotFound) {
		d.fail(w, "search", err)
		return
	}
	d.render(w, r, http.StatusNotFound, "notfound", &sess, pageData{Title: "No such job", Data: "job " + id})
}
