package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A workflow run (Config.Workflows) submits graphs instead of plain jobs:
// a flow job of durable steps with a sleep between them, and a child
// after it. Its workers print, besides exec and done:
//
//	step <job> <step> <delivery>   it runs the step's work now
//	stepok <job> <step>            STEP.COMPLETE of it was answered +OK
//	parked <job> <delivery>        the job sleeps: the delivery ends here
//	early <job> <parent> <status>  a child was delivered before its parent ended
//
// so that the run can count steps answered +OK whose work ran again, and
// children started before a parent ended: both must be 0.

// flowSteps are a flow job's steps, with a sleep (flowNap) after the
// second.
var flowSteps = []string{"fetch", "transform", "store"}

const (
	flowNap      = "nap"
	flowNapAfter = 2 // steps before the sleep
)

// flowDelivery is what a workflow worker reads of a delivery.
type flowDelivery struct {
	chaosJob
	Payload struct {
		Flow bool `json:"flow"`
	} `json:"payload"`
	Parents map[string]struct {
		Status string `json:"status"`
	} `json:"parents"`
}

// flowGraph is one producer's submission in a workflow run: the flow job
// id and its child's.
func flowGraph(id string) (doc string, ids []string) {
	child := id + "-after"
	doc = fmt.Sprintf(`[{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100,"payload":{"flow":true}},`+
		`{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100,"after":[%q]}]`, id, queue, child, queue, id)
	return doc, []string{id, child}
}

// runFlow works one delivery of a workflow run: a child checks its
// parents, a flow job runs its steps (a step whose output is kept is not
// run again) and sleeps once; then the job is completed.
func (w *chaosWorker) runFlow(raw string, job chaosJob) {
	var d flowDelivery
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		w.say("err delivery %q", raw)
		return
	}
	for parent, p := range d.Parents {
		if p.Status != "completed" && p.Status != "failed" && p.Status != "cancelled" {
			w.say("early %s %s %s", job.JobID, parent, p.Status)
		}
	}
	if d.Payload.Flow {
		for i, step := range flowSteps {
			if i == flowNapAfter {
				reply, ok := w.stepCall(job, "STEP.SLEEP", job.JobID, flowNap, "1")
				if !ok {
					return
				}
				if strings.HasPrefix(reply, "SLEEPING") {
					w.say("parked %s %s", job.JobID, job.Delivery)
					return
				}
			}
			if !w.runStep(job, step) {
				return
			}
		}
	}
	w.complete(job)
}

// runStep begins a step, runs it if told to, and completes it; false when
// the server refused a call (the delivery is over).
func (w *chaosWorker) runStep(job chaosJob, step string) bool {
	reply, ok := w.stepCall(job, "STEP.BEGIN", job.JobID, step)
	if !ok {
		return false
	}
	var begun struct {
		Execute bool `json:"execute"`
	}
	if err := json.Unmarshal([]byte(reply), &begun); err != nil {
		w.say("err begin %q", reply)
		return false
	}
	if !begun.Execute {
		return true
	}
	w.say("step %s %s %s", job.JobID, step, job.Delivery)
	time.Sleep(w.cfg.Work)
	if _, ok := w.stepCall(job, "STEP.COMPLETE", job.JobID, step, fmt.Sprintf(`{"by":%q}`, w.cfg.ID)); !ok {
		return false
	}
	w.say("stepok %s %s", job.JobID, step)
	return true
}

// stepCall sends a step command for job's delivery until the server
// answers it; a refusal ends the delivery (false), printed as a refused
// report. The same call sent again by the same delivery answers as the
// first time.
func (w *chaosWorker) stepCall(job chaosJob, args ...string) (string, bool) {
	cmd := make([]any, 0, len(args)+2)
	for _, a := range args {
		cmd = append(cmd, a)
	}
	cmd = append(cmd, "DELIVERY", job.Delivery)
	for wait := time.Duration(0); sleep(w.ctx, wait); wait = backoff(wait) {
		reply, err := w.c.Do(w.ctx, cmd...).Text()
		var refused redis.Error
		switch {
		case err == nil:
			return reply, true
		case errors.As(err, &refused) && !strings.HasPrefix(err.Error(), "TRYAGAIN"):
			w.say("done %s %s refused %s", job.JobID, job.Delivery, oneLine(err))
			return "", false
		}
		w.say("err %s %s", strings.ToLower(args[0]), oneLine(err))
	}
	return "", false
}
