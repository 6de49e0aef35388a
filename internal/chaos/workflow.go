package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A workflow run (Config.Workflows) submits graphs instead of plain jobs:
// a flow job of durable steps, and a child after it. Flow jobs take turns
// at five shapes (flowKind): a sleep between their steps; a wait for a
// signal the producer sends (JOB.SIGNAL with an ID, re-sent after errors),
// with a deadline far enough away that it must never pass, or with one
// that the signal may beat or not; a wait for a signal nobody sends, which
// must time out; and a parent that spawns children with its worker's key
// and awaits them (STEP.WAIT JOBS). Its
// workers print, besides exec and done:
//
//	begin <job> <step> <delivery>  it sends STEP.BEGIN of the step now
//	step <job> <step> <delivery>   it was told to run the step's work, and does
//	stepok <job> <step>            STEP.COMPLETE of it was answered +OK
//	parked <job> <delivery>        the job sleeps or waits: the delivery ends here
//	early <job> <parent> <status>  a child was delivered before its parent ended,
//	                               or a parent woke before a child it awaits ended
//	spawned <job>                  a child's JOB.SUBMIT was answered +OK
//
// so that the run can count steps whose work ran again though their
// STEP.BEGIN was sent after their STEP.COMPLETE was answered +OK (a worker
// stopped between its STEP.BEGIN and the reply may be told to run a step
// that another delivery then completes: that is no re-run), and
// children started before a parent ended: both must be 0. What became of
// the signals answered +OK is read from the database at the end
// (ledger.accountSignals).

// flowSteps are a flow job's steps; the sleep or the wait (if any) of its
// kind comes after the second.
var flowSteps = []string{"fetch", "transform", "store"}

const (
	flowNap      = "nap"
	flowNapAfter = 2 // steps before the sleep or the wait
	// flowWait is the step that waits for a signal (flowSignal) or for
	// the children (flowSpawn); flowSignalName the signal's name.
	flowWait       = "await"
	flowSignalName = "go"
	// flowSignalTimeout is the deadline of a wait whose signal is sent:
	// long past any fault's recovery, so it must never pass.
	flowSignalTimeout = 120
	// flowLapseTimeout is the deadline of a wait whose signal never comes.
	flowLapseTimeout = 1
	// flowCloseTimeout is the deadline of a wait whose signal is sent
	// within two seconds of its submission (or later, after errors): the
	// signal or the deadline may come first.
	flowCloseTimeout = 1
	// flowChildren is how many children a spawning parent submits.
	flowChildren = 2
)

// The shapes of a flow job, taken in turn by submission number.
const (
	flowSleep  = ""       // a sleep between the steps
	flowSignal = "signal" // a wait for the signal the producer sends
	flowClose  = "close"  // the same, with a deadline that may come first
	flowLapse  = "lapse"  // a wait for a signal nobody sends: it times out
	flowSpawn  = "spawn"  // spawns children and awaits them
)

var flowKinds = []string{flowSleep, flowSignal, flowLapse, flowSpawn, flowClose}

// signalled reports whether the producer sends a signal to flow jobs of
// kind.
func signalled(kind string) bool { return kind == flowSignal || kind == flowClose }

// flowKind is the shape of the n-th flow job.
func flowKind(n int64) string { return flowKinds[n%int64(len(flowKinds))] }

// signalID is the ID the producer sends job's signal with.
func signalID(job string) string { return "sig-" + job }

// flowDelivery is what a workflow worker reads of a delivery.
type flowDelivery struct {
	chaosJob
	Payload struct {
		Flow bool   `json:"flow"`
		Kind string `json:"kind"`
	} `json:"payload"`
	Parents map[string]struct {
		Status string `json:"status"`
	} `json:"parents"`
}

// flowGraph is one producer's submission in a workflow run: the flow job
// id, of shape kind, and its child's.
func flowGraph(id, kind string) (doc string, ids []string) {
	child := id + "-after"
	doc = fmt.Sprintf(`[{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100,"payload":{"flow":true,"kind":%q}},`+
		`{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100,"after":[%q]}]`, id, queue, kind, child, queue, id)
	return doc, []string{id, child}
}

// runFlow works one delivery of a workflow run: a child checks its
// parents, a flow job runs its steps (a step whose output is kept is not
// run again) and sleeps or waits once; then the job is completed.
func (w *chaosWorker) runFlow(raw string, job chaosJob) {
	var d flowDelivery
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		w.say("err delivery %q", raw)
		return
	}
	for parent, p := range d.Parents {
		if !ended(p.Status) {
			w.say("early %s %s %s", job.JobID, parent, p.Status)
		}
	}
	if d.Payload.Flow {
		for i, step := range flowSteps {
			if i == flowNapAfter {
				parked, ok := w.pause(job, d.Payload.Kind)
				if !ok || parked {
					return
				}
			}
			if !w.runStep(job, step, w.stepWork) {
				return
			}
		}
	}
	w.complete(job)
}

func ended(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// pause sleeps or waits as the job's kind says: parked when the delivery
// ends there (the job sleeps or awaits), false when a call was refused.
func (w *chaosWorker) pause(job chaosJob, kind string) (parked, ok bool) {
	var reply string
	switch kind {
	case flowSleep:
		reply, ok = w.stepCall(job, "STEP.SLEEP", job.JobID, flowNap, "1")
	case flowSignal, flowClose, flowLapse:
		name, timeout := flowSignalName, flowSignalTimeout
		switch kind {
		case flowClose:
			timeout = flowCloseTimeout
		case flowLapse:
			name, timeout = "never", flowLapseTimeout
		}
		reply, ok = w.stepCall(job, "STEP.WAIT", job.JobID, flowWait, "SIGNAL", name, "TIMEOUT", fmt.Sprint(timeout))
	case flowSpawn:
		var kids []string
		for i := range flowChildren {
			kids = append(kids, fmt.Sprintf("%s-kid-%d", job.JobID, i))
		}
		if !w.runStep(job, "spawn", func() bool { return w.spawn(kids) }) {
			return false, false
		}
		reply, ok = w.stepCall(job, append([]string{"STEP.WAIT", job.JobID, flowWait, "JOBS"}, kids...)...)
		if ok && !strings.HasPrefix(reply, "AWAITING") {
			var out struct {
				Jobs map[string]struct {
					Status string `json:"status"`
				} `json:"jobs"`
			}
			json.Unmarshal([]byte(reply), &out)
			for _, kid := range kids {
				if st := out.Jobs[kid].Status; !ended(st) {
					w.say("early %s %s %s", job.JobID, kid, cmp.Or(st, "missing"))
				}
			}
		}
	default:
		w.say("err kind %q", kind)
		return false, false
	}
	if !ok {
		return false, false
	}
	if strings.HasPrefix(reply, "SLEEPING") || strings.HasPrefix(reply, "AWAITING") {
		w.say("parked %s %s", job.JobID, job.Delivery)
		return true, true
	}
	return false, true
}

// stepWork is a step's work: it takes the run's work time.
func (w *chaosWorker) stepWork() bool {
	time.Sleep(w.cfg.Work)
	return true
}

// spawn submits the children with the worker's own key, each re-sent
// until it is answered (+OK, or a refusal: printed as an error); false
// when ctx ended first.
func (w *chaosWorker) spawn(kids []string) bool {
	for _, kid := range kids {
		doc := fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100}`, kid, queue)
		for wait := time.Duration(0); ; wait = backoff(wait) {
			if !sleep(w.ctx, wait) {
				return false
			}
			err := w.c.Do(w.ctx, "JOB.SUBMIT", doc).Err()
			if err == nil {
				w.say("spawned %s", kid)
				break
			}
			w.say("err submit %s", oneLine(err))
			var refused redis.Error
			if errors.As(err, &refused) && !strings.HasPrefix(err.Error(), "TRYAGAIN") {
				break
			}
		}
	}
	return true
}

// runStep begins a step, runs work if told to, and completes it; false
// when the server refused a call or work failed (the delivery is over).
func (w *chaosWorker) runStep(job chaosJob, step string, work func() bool) bool {
	w.say("begin %s %s %s", job.JobID, step, job.Delivery)
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
	if !work() {
		return false
	}
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

// sendSignal sends the signal job n waits for, after a pause of up to a
// second (so that some arrive before the wait begins, some after; up to
// two for a wait with a close deadline, so that some come after it), each
// time to the next node, re-sent with its ID after every error until it is
// answered +OK or refused; the +OK is noted in the ledger with its time.
func (r *run) sendSignal(ctx context.Context, clients []*redis.Client, job string, n int64) {
	spread := int64(1000)
	if flowKind(n) == flowClose {
		spread = 2000
	}
	if !sleep(ctx, time.Duration(n*37%spread)*time.Millisecond) {
		return
	}
	payload := fmt.Sprintf(`{"n":%d}`, n)
	for try, wait := int(n), time.Duration(0); sleep(ctx, wait); try, wait = try+1, backoff(wait) {
		err := clients[try%len(clients)].Do(ctx, "JOB.SIGNAL", job, flowSignalName, payload, "ID", signalID(job)).Err()
		if err == nil {
			r.ledger.signalOK(job, time.Now(), flowKind(n) == flowSignal)
			return
		}
		if ctx.Err() != nil {
			return
		}
		// A refusal about the job is final (counted without its id: a
		// wait with a close deadline may have timed out and its job
		// ended); anything else (TRYAGAIN, a timeout, a lost connection)
		// may or may not have stored it: the ID makes sending it again
		// safe.
		if msg := err.Error(); strings.HasPrefix(msg, "ERR job ") || strings.HasPrefix(msg, "ERR no such job") {
			r.ledger.clientErr("signal", strings.Replace(msg, " "+job, "", 1))
			return
		}
		r.ledger.clientErr("signal", err.Error())
	}
}
