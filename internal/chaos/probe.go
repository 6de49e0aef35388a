package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// probeInterval bounds how finely a pause in writes is measured.
	probeInterval = 20 * time.Millisecond
	// probesInFlight caps the probes waiting on a stalled database.
	probesInFlight = 32
)

// startProbes submits a job every probeInterval, each on its own, to the
// nodes in turn, without the producers' backoff: the submissions
// acknowledged then show to within probeInterval when agq took writes
// again after a fault. A probe that fails is not re-sent (it was never
// acknowledged, so the ledger does not count it).
func (r *run) startProbes(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	clients := make([]*redis.Client, len(r.addrs))
	for i := range clients {
		clients[i] = r.admin(i)
	}
	slots := make(chan struct{}, probesInFlight)
	wg.Go(func() {
		var probes sync.WaitGroup
		defer func() {
			probes.Wait()
			for _, c := range clients {
				c.Close()
			}
		}()
		t := time.NewTicker(probeInterval)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				continue // enough probes wait already
			}
			id := fmt.Sprintf("probe-%07d", n)
			doc := fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100}`, id, queue)
			c := clients[n%len(clients)]
			probes.Go(func() {
				defer func() { <-slots }()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if c.Do(pctx, "JOB.SUBMIT", doc).Err() == nil {
					r.ledger.ack(id)
				}
			})
		}
	})
	return &wg
}
