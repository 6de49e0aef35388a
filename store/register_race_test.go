package store_test

import (
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/agq/agq/records"
)

// A worker registering again and heartbeating while groups of its final
// reports commit touches the same job rows from the other side: neither
// may fail for it (a deadlock between them is retried, not an error).
func TestRegisterAndHeartbeatBesideReportGroups(t *testing.T) {
	t.Parallel()
	ctx, st := storeWithWorkers(t, "w-r")
	for round := range 5 {
		jobs := submitAndClaim(ctx, t, st, "rr"+string(rune('a'+round)), 300, "w-r")
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		var wg sync.WaitGroup
		done := make(chan struct{})
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g * 100; i < (g+1)*100; i += 50 {
					var ps []records.Report
					for _, j := range jobs[i : i+50] {
						ps = append(ps, records.Report{ID: j.ID, WorkerID: "w-r", Status: records.StatusCompleted,
							Attempt: j.Attempt, Delivery: *j.Delivery, Raw: json.RawMessage(`{}`)})
					}
					errs, _ := st.JobsFinish(ctx, ps)
					for _, err := range errs {
						if err != nil {
							t.Errorf("report: %v", err)
						}
					}
				}
			}()
		}
		go func() { wg.Wait(); close(done) }()
		w := records.Worker{ID: "w-r", Principal: "w-r", Hostname: "h", AgwVersion: "1", Capabilities: []string{"t"},
			Metadata: json.RawMessage(`{}`), MaxConcurrentJobs: 10}
	loop:
		for {
			select {
			case <-done:
				break loop
			default:
			}
			if _, err := st.WorkerRegister(ctx, w, time.Minute, ids); err != nil {
				t.Errorf("register: %v", err)
			}
			if _, err := st.WorkerHeartbeat(ctx, "w-r", nil, time.Minute); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
		}
	}
}
