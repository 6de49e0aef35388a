package commands_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// Failed AUTHs are limited per source address: fresh connections buy no
// fresh attempts, while a client with a valid key is not held up.
func TestAuthFailuresAreSlowedPerAddress(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	const attempts, rate, burst = 50, 10, 10 // the limiter's rate and burst
	start := time.Now()
	var wg sync.WaitGroup
	for range 5 { // five attackers from one address, ten fresh connections each
		wg.Go(func() {
			for range attempts / 5 {
				c := a.Client(t, redis.Options{Password: strings.Repeat("0", 64), MaxRetries: -1, ReadTimeout: 10 * time.Second})
				if err := c.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
					t.Errorf("a wrong key: %v", err)
				}
				c.Close()
			}
		})
	}
	// Meanwhile, the right key gets in at once.
	time.Sleep(500 * time.Millisecond)
	okStart := time.Now()
	if err := a.Admin(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("a valid key while an address fails: %v", err)
	}
	if d := time.Since(okStart); d > time.Second {
		t.Errorf("a valid key waited %v", d)
	}
	wg.Wait()
	// Past the burst, failures are answered at the rate at most.
	if min := time.Duration(attempts-burst) * time.Second / rate * 9 / 10; time.Since(start) < min {
		t.Fatalf("%d failed AUTHs over fresh connections took %v, less than the %v the limit allows", attempts, time.Since(start), min)
	}
}
