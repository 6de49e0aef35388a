package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

func key(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }

func main() {
	ctx := context.Background()
	addr := "127.0.0.1:7390"
	admin := key("/tmp/rv1/admin.key")
	wk := key("/tmp/rv1w1.key")
	pk := key("/tmp/rv1p1.key")
	show := func(label string, v any, err error) { fmt.Printf("%-40s %#v err=%v\n", label, v, err) }

	// Admin, password only, default options (RESP3)
	a := redis.NewClient(&redis.Options{Addr: addr, Password: admin})
	v, err := a.Ping(ctx).Result(); show("admin pw-only ping", v, err)
	hello, err := a.Do(ctx, "HELLO", "3").Result(); show("admin HELLO 3", hello, err)
	id, err := a.Do(ctx, "JOB.SUBMIT", `{"type":"x","queue":"gr"}`).Result(); show("admin submit", id, err)
	l, err := a.Do(ctx, "JOB.LIST", "QUEUE", "gr").Result(); show("job.list type", fmt.Sprintf("%T", l), err)
	ids, err := a.Do(ctx, "JOB.SUBMIT", `[{"type":"x","queue":"gr"},{"type":"x","queue":"gr"}]`).StringSlice(); show("batch", ids, err)
	n, err := a.LPush(ctx, "queue:gr", `{"type":"x"}`).Result(); show("lpush", n, err)
	n, err = a.LLen(ctx, "queue:gr").Result(); show("llen", n, err)
	lr, err := a.LRange(ctx, "queue:gr", 0, 1).Result(); show("lrange count", len(lr), err)
	cn, err := a.ClientID(ctx).Result(); show("client id", cn, err)
	inf, err := a.Info(ctx, "server").Result(); show("info server len", len(inf), err)
	tm, err := a.Time(ctx).Result(); show("time", tm, err)
	ks, err := a.Keys(ctx, "queue:*").Result(); show("keys queue:*", ks, err)
	sk, cur, err := a.Scan(ctx, 0, "queue:*", 10).Result(); show("scan", fmt.Sprint(sk, cur), err)
	s, err := a.Set(ctx, "foo", "bar", 0).Result(); show("set", s, err)
	g, err := a.Get(ctx, "nosuch").Result(); show("get nosuch", g, err)
	e, err := a.Exists(ctx, "queue:gr", "nosuch").Result(); show("exists", e, err)
	t, err := a.Type(ctx, "queue:gr").Result(); show("type queue:gr", t, err)
	ms, err := a.Do(ctx, "QUEUE.STATS", "gr").Result(); show("queue.stats", ms, err)
	ql, err := a.Do(ctx, "QUEUE.LIST").Result(); show("queue.list", ql, err)

	// ClientName
	cnc := redis.NewClient(&redis.Options{Addr: addr, Password: admin, ClientName: "my-client"})
	name, err := cnc.ClientGetName(ctx).Result(); show("ClientName getname", name, err)
	// Protocol 2
	c2 := redis.NewClient(&redis.Options{Addr: addr, Password: admin, Protocol: 2})
	v, err = c2.Ping(ctx).Result(); show("proto2 ping", v, err)
	g, err = c2.Get(ctx, "nosuch").Result(); show("proto2 get nosuch", g, err)
	// bad password
	bad := redis.NewClient(&redis.Options{Addr: addr, Password: "bad", MaxRetries: -1})
	v, err = bad.Ping(ctx).Result(); show("bad pw ping", v, err)
	bad2 := redis.NewClient(&redis.Options{Addr: addr, Username: "w1", Password: "bad", MaxRetries: -1})
	v, err = bad2.Ping(ctx).Result(); show("bad user/pw ping", v, err)

	// Producer password only
	p := redis.NewClient(&redis.Options{Addr: addr, Password: pk})
	pid, err := p.Do(ctx, "JOB.SUBMIT", `{"type":"x","queue":"gw"}`).Text(); show("producer submit", pid, err)

	reg := func(wid string) string {
		b, _ := json.Marshal(map[string]any{"worker_id": wid, "hostname": "h", "platform": "linux", "agw_version": "1", "capabilities": map[string]any{"tools": []string{}, "agentic_units": []string{}, "types": []string{"x"}}, "max_concurrent_jobs": 4, "tags": map[string]string{}})
		return string(b)
	}
	for _, mode := range []string{"userpass", "pwonly"} {
		var w *redis.Client
		wid := "gw-" + mode
		if mode == "userpass" {
			w = redis.NewClient(&redis.Options{Addr: addr, Username: wid, Password: wk, PoolSize: 8})
		} else {
			w = redis.NewClient(&redis.Options{Addr: addr, Password: wk, PoolSize: 8})
		}
		r, err := w.Do(ctx, "WORKER.REGISTER", reg(wid)).Result(); show(mode+" register", r, err)
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				res, err := w.BRPop(ctx, 1500*time.Millisecond, "queue:none", "queue:gw").Result()
				if err == nil {
					var j map[string]any
					json.Unmarshal([]byte(res[1]), &j)
					show(fmt.Sprintf("%s brpop %d", mode, i), res[0]+" "+fmt.Sprint(j["job_id"]), nil)
					u, err := w.Do(ctx, "JOB.UPDATE", j["job_id"], `{"status":"completed","task_results":[]}`).Result()
					show(fmt.Sprintf("%s update %d", mode, i), u, err)
				} else {
					show(fmt.Sprintf("%s brpop %d", mode, i), nil, err)
				}
			}(i)
		}
		time.Sleep(200 * time.Millisecond)
		p.Do(ctx, "JOB.SUBMIT", `{"type":"x","queue":"gw"}`)
		wg.Wait()
		hb, err := w.Do(ctx, "WORKER.HEARTBEAT", wid).Result(); show(mode+" hb", hb, err)
		un, err := w.Do(ctx, "WORKER.UNREGISTER", wid).Result(); show(mode+" unregister", un, err)
		fmt.Println("pool stats", w.PoolStats().TotalConns)
	}
	wa, err := p.Do(ctx, "JOB.WAIT", pid, "1").Text(); show("producer wait", len(wa), err)
}
