package commands_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// Namespaces are made, listed and entered as §6f says; keys are bound to
// theirs, and principals are unique across them.
func TestNamespacesAndTheirKeys(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	ok := func(c *redis.Client, want string, args ...any) {
		t.Helper()
		if got, err := c.Do(ctx, args...).Text(); err != nil || got != want {
			t.Fatalf("%v = %q, %v; want %q", args, got, err, want)
		}
	}
	refused := func(c *redis.Client, want string, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err == nil || err.Error() != want {
			t.Fatalf("%v = %v, want %q", args, err, want)
		}
	}

	ok(admin, "OK", "NAMESPACE.CREATE", "team-a")
	ok(admin, "OK", "NAMESPACE.CREATE", "team-a") // again: the same
	ok(admin, "OK", "NAMESPACE.CREATE", "team-b")
	if got, err := admin.Do(ctx, "NAMESPACE.LIST").StringSlice(); err != nil || strings.Join(got, ",") != "default,team-a,team-b" {
		t.Fatalf("NAMESPACE.LIST = %q, %v", got, err)
	}
	refused(admin, "ERR invalid namespace name 'team a': a namespace is named as a queue, 1-128 letters, digits, '_', '-' or '.'", "NAMESPACE.CREATE", "team a")

	// A cluster admin's connection starts in default and moves.
	ok(admin, "default", "NAMESPACE")
	refused(admin, "ERR no such namespace nowhere", "NAMESPACE", "nowhere")
	conn := admin.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "NAMESPACE", "team-a").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := conn.Do(ctx, "NAMESPACE").Text(); err != nil || got != "team-a" {
		t.Fatalf("NAMESPACE after moving = %q, %v", got, err)
	}

	// Keys bound to a namespace act there and only there.
	alice := a.InNamespace(t, "team-a", "producer", "alice")
	ok(alice, "team-a", "NAMESPACE")
	ok(alice, "OK", "NAMESPACE", "team-a")
	refused(alice, "NOPERM this key belongs to namespace team-a", "NAMESPACE", "team-b")
	refused(admin, "ERR principal alice belongs to namespace team-a", "KEY.CREATE", "producer", "alice", "NAMESPACE", "team-b")
	refused(admin, "ERR principal alice belongs to namespace team-a", "KEY.CREATE", "producer", "alice")
	if err := admin.Do(ctx, "KEY.CREATE", "admin", "root-2").Err(); err != nil {
		t.Fatal(err)
	}
	refused(admin, "ERR principal root-2 is a key of every namespace", "KEY.CREATE", "admin", "root-2", "NAMESPACE", "team-b")
	refused(admin, "ERR no such namespace nowhere", "KEY.CREATE", "producer", "carol", "NAMESPACE", "nowhere")
	refused(admin, "ERR syntax error", "KEY.CREATE", "producer", "carol", "NAMESPACES", "team-a")

	// A namespace's own admin manages its namespace's keys only.
	boss := a.InNamespace(t, "team-a", "admin", "boss-a")
	if _, err := boss.Do(ctx, "KEY.CREATE", "worker", "wa-1").Text(); err != nil {
		t.Fatal(err)
	}
	refused(boss, "NOPERM this key belongs to namespace team-a", "KEY.CREATE", "worker", "wb-1", "NAMESPACE", "team-b")
	refused(boss, "NOPERM this key belongs to namespace team-a", "NAMESPACE.CREATE", "team-c")
	refused(boss, "NOPERM this key belongs to namespace team-a", "NAMESPACE.DELETE", "team-b")
	refused(boss, "NOPERM this key belongs to namespace team-a", "NAMESPACE.CONFIG", "team-a", "MAXUNFINISHED", "5")
	refused(boss, "ERR no such principal", "KEY.REVOKE", "admin")
	list, err := boss.Do(ctx, "KEY.LIST").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		row := e.([]any)
		if row[4] != "team-a" {
			t.Errorf("a namespace admin's KEY.LIST shows %v", row)
		}
		names = append(names, row[0].(string))
	}
	if strings.Join(names, ",") != "alice,boss-a,wa-1" {
		t.Errorf("team-a's KEY.LIST = %v", names)
	}
	if got, err := boss.Do(ctx, "NAMESPACE.LIST").StringSlice(); err != nil || strings.Join(got, ",") != "team-a" {
		t.Errorf("a namespace admin's NAMESPACE.LIST = %q, %v", got, err)
	}
	if got, err := boss.Do(ctx, "NAMESPACE.CONFIG", "team-a").Result(); err != nil || len(got.(map[any]any)) != 10 {
		t.Errorf("a namespace admin's NAMESPACE.CONFIG of its own = %v, %v", got, err)
	}
}

// NAMESPACE.CONFIG takes each setting within its bounds, answers the
// map of §6f, and changes nothing on bad input.
func TestNamespaceConfigSettingsAndBadInput(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	admin := a.Admin(t)
	if err := admin.Do(ctx, "NAMESPACE.CREATE", "ops").Err(); err != nil {
		t.Fatal(err)
	}
	config := func(args ...any) (map[string]any, error) {
		v, err := admin.Do(ctx, append([]any{"NAMESPACE.CONFIG", "ops"}, args...)...).Result()
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for k, v := range v.(map[any]any) {
			m[k.(string)] = v
		}
		return m, nil
	}
	got, err := config("MAXUNFINISHED", "100", "SUBMITRATE", "10", "PER", "60", "MAXRUNNING", "7",
		"RETAINCOMPLETED", "3600", "RETAINFAILED", "86400")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "ops", "max_unfinished": int64(100), "submit_rate": int64(10), "submit_period": int64(60),
		"max_running": int64(7), "retain_completed": int64(3600), "retain_failed": int64(86400),
		"unfinished": int64(0), "running": int64(0), "submitted_last_minute": int64(0)}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, bad := range []struct {
		args []any
		want string
	}{
		{[]any{"MAXUNFINISHED", "-1"}, "ERR MAXUNFINISHED must be NONE or a whole number from 1 to 1000000000"},
		{[]any{"MAXUNFINISHED", "1000000001"}, "ERR MAXUNFINISHED must be NONE or a whole number from 1 to 1000000000"},
		{[]any{"MAXRUNNING", "0"}, "ERR MAXRUNNING must be NONE or a whole number from 1 to 1000000000"},
		{[]any{"SUBMITRATE", "5", "PER", "86401"}, "ERR SUBMITRATE period must be a whole number from 1 to 86400"},
		{[]any{"SUBMITRATE", "5"}, "ERR syntax error"},
		{[]any{"RETAINCOMPLETED", "59"}, "ERR RETAINCOMPLETED must be NONE or a whole number of seconds from 60 to 315360000 (ten years)"},
		{[]any{"MAXRUNNING", "3", "MAXRUNNING", "4"}, "ERR syntax error"},
		{[]any{"COLOUR", "blue"}, "ERR syntax error"},
	} {
		if _, err := config(bad.args...); err == nil || err.Error() != bad.want {
			t.Errorf("NAMESPACE.CONFIG ops %v = %v, want %q", bad.args, err, bad.want)
		}
	}
	if err := admin.Do(ctx, "NAMESPACE.CONFIG", "nowhere").Err(); err == nil || err.Error() != "ERR no such namespace nowhere" {
		t.Errorf("NAMESPACE.CONFIG nowhere = %v", err)
	}
	// Nothing changed by the refusals; NONE removes.
	got, err = config("MAXRUNNING", "NONE", "RETAINFAILED", "NONE", "SUBMITRATE", "NONE")
	if err != nil {
		t.Fatal(err)
	}
	if got["max_unfinished"] != int64(100) || got["max_running"] != nil || got["retain_failed"] != nil ||
		got["submit_rate"] != nil || got["submit_period"] != nil || got["retain_completed"] != int64(3600) {
		t.Errorf("after NONE: %v", got)
	}
}

// /metrics counts jobs submitted, started and recovered by namespace.
func TestMetricsCountJobsByNamespace(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := ctxT(t)
	producer := a.InNamespace(t, "metered", "producer", "metered-p")
	for i := range 3 {
		if err := producer.Do(ctx, "JOB.SUBMIT", `{"job_id":"m-`+string(rune('a'+i))+`","queue":"q"}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := producer.Do(ctx, "JOB.SUBMIT", `{"job_id":"m-a","queue":"q"}`).Err(); err != nil {
		t.Fatal(err) // re-sent: the same job, not counted again
	}
	key, err := a.Admin(t).Do(ctx, "KEY.CREATE", "worker", "metered-w", "NAMESPACE", "metered").Text()
	if err != nil {
		t.Fatal(err)
	}
	w := a.Client(t, redis.Options{Username: "metered-w", Password: key})
	if err := w.Do(ctx, "WORKER.REGISTER", `{"worker_id":"metered-w","hostname":"h","agw_version":"1","capabilities":{"tools":[]}}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Do(ctx, "BRPOP", "queue:q", "5").Err(); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, a, `agq_jobs_total{event="submitted",namespace="metered"}`); got != 3 {
		t.Errorf("submitted in metered = %v, want 3", got)
	}
	if got := metric(t, a, `agq_jobs_total{event="started",namespace="metered"}`); got != 1 {
		t.Errorf("started in metered = %v, want 1", got)
	}
	// The worker leaves holding its job: the job goes back, counted as
	// recovered in its namespace.
	if err := w.Do(ctx, "WORKER.UNREGISTER", "metered-w").Err(); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, a, `agq_jobs_recovered_total{namespace="metered",reason="worker_left"}`); got != 1 {
		t.Errorf("recovered in metered = %v, want 1", got)
	}
}
