package patroni

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// Member is one server as Patroni's REST API describes it.
type Member struct {
	Name  string `json:"name"`
	Role  string `json:"role"`  // leader, sync_standby, replica
	State string `json:"state"` // running, starting, stopped…
}

// Members asks the first member's REST API that answers for the cluster.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	var err error
	for _, m := range c.members {
		var doc struct{ Members []Member }
		if err = httpGet(ctx, fmt.Sprintf("http://%s/cluster", addr(m.apiPort)), &doc); err == nil {
			return doc.Members, nil
		}
	}
	return nil, fmt.Errorf("no Patroni REST API answers: %w", err)
}

// WaitHealthy waits until a member leads and another streams to it as its
// synchronous standby, both running, and returns the leader: from then on
// a commit the leader acknowledged survives the leader's loss.
func (c *Cluster) WaitHealthy(ctx context.Context) (leader string, err error) {
	err = waitFor(ctx, startLimit, func() error {
		members, err := c.Members(ctx)
		if err != nil {
			return err
		}
		leader = ""
		sync := false
		for _, m := range members {
			switch {
			case m.State != "running":
			case m.Role == "leader":
				leader = m.Name
			case m.Role == "sync_standby":
				sync = true
			}
		}
		if leader == "" || !sync {
			return fmt.Errorf("no running leader with a synchronous standby yet: %+v", members)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("%w (logs in %s)", err, c.dir)
	}
	return leader, nil
}

// roles returns the running leader and synchronous standby, if any.
func (c *Cluster) roles(ctx context.Context) (leader, sync string, err error) {
	members, err := c.Members(ctx)
	if err != nil {
		return "", "", err
	}
	for _, m := range members {
		if m.State == "running" && m.Role == "leader" {
			leader = m.Name
		}
		if m.State == "running" && m.Role == "sync_standby" {
			sync = m.Name
		}
	}
	if leader == "" || sync == "" {
		return "", "", fmt.Errorf("no running leader and synchronous standby: %+v", members)
	}
	return leader, sync, nil
}

// Fault injects a fault (Switchover or PrimaryKill) into a healthy cluster
// and returns once it is under way: a switchover once patronictl says it
// is done, a kill at once.
func (c *Cluster) Fault(ctx context.Context, fault string) error {
	switch fault {
	case Switchover:
		_, err := c.Switchover(ctx)
		return err
	case PrimaryKill:
		_, err := c.KillPrimary()
		return err
	}
	return fmt.Errorf("unknown fault %q", fault)
}

// Heal waits until the cluster is healthy again (see WaitHealthy): the
// member that lost its primary role follows the new one synchronously.
func (c *Cluster) Heal(ctx context.Context) error {
	_, err := c.WaitHealthy(ctx)
	return err
}

// Switchover has Patroni hand the primary role to the synchronous standby,
// as an operator would with patronictl, and returns the new leader.
func (c *Cluster) Switchover(ctx context.Context) (string, error) {
	leader, sync, err := c.roles(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "patronictl", "-c", c.members[0].config, "switchover",
		"--leader", leader, "--candidate", sync, "--force")
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Successfully switched over") {
		return "", fmt.Errorf("patronictl switchover from %s to %s: %v\n%s", leader, sync, err, out)
	}
	return sync, nil
}

// KillPrimary kills the leader's postmaster with SIGKILL, as the machine's
// out-of-memory killer might, and returns the leader's name. Patroni then
// promotes the synchronous standby (primary_start_timeout is 0).
func (c *Cluster) KillPrimary() (string, error) {
	leader, _, err := c.roles(context.Background())
	if err != nil {
		return "", err
	}
	for _, m := range c.members {
		if m.name != leader {
			continue
		}
		pid, ok := postmasterPID(m.dataDir)
		if !ok {
			return "", fmt.Errorf("no postmaster running in %s", m.dataDir)
		}
		return leader, syscall.Kill(pid, syscall.SIGKILL)
	}
	return "", errors.New("the leader is no member of ours")
}

// WaitLeader waits until a member other than old leads, running, and
// returns it.
func (c *Cluster) WaitLeader(ctx context.Context, old string) (string, error) {
	var leader string
	err := waitFor(ctx, startLimit, func() error {
		members, err := c.Members(ctx)
		if err != nil {
			return err
		}
		for _, m := range members {
			if m.Role == "leader" && m.State == "running" && m.Name != old {
				leader = m.Name
				return nil
			}
		}
		return fmt.Errorf("no new leader yet: %+v", members)
	})
	return leader, err
}
