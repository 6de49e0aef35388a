package leader_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/leader"
	"github.com/agq/agq/internal/service"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

func TestOneLeadsAndAnotherTakesOverWhenItStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	url := agqtest.NewDatabase(t)
	var leading [2]atomic.Bool
	electors := make([]*leader.Elector, 2)
	for i := range electors {
		electors[i] = leader.New(leader.Config{
			ConnString: url,
			NodeID:     []string{"a", "b"}[i],
			Interval:   20 * time.Millisecond,
			Lead: func(ctx context.Context) {
				leading[i].Store(true)
				<-ctx.Done()
				leading[i].Store(false)
			},
		})
	}
	all := []service.Service{electors[0], electors[1]}
	if err := service.StartAll(context.Background(), all...); err != nil {
		t.Fatal(err)
	}
	defer service.StopAll(all...)

	first := -1
	agqtest.Eventually(t, 10*time.Second, func() error {
		for i, e := range electors {
			if e.IsLeader() && leading[i].Load() {
				first = i
				return nil
			}
		}
		return errNoLeader
	})
	other := 1 - first
	if electors[other].IsLeader() || leading[other].Load() {
		t.Fatal("both nodes lead")
	}
	electors[first].Stop()
	if electors[first].IsLeader() || leading[first].Load() {
		t.Fatal("a stopped elector still leads")
	}
	agqtest.Eventually(t, 10*time.Second, func() error {
		if !electors[other].IsLeader() || !leading[other].Load() {
			return errNoLeader
		}
		return nil
	})
}

var errNoLeader = errors.New("no node leads")
