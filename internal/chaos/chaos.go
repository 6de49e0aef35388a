// Package chaos runs agq nodes, worker processes and producers on a
// PostgreSQL primary with a synchronous standby, injects faults — agq nodes
// and workers killed, workers stopped past their heartbeats, PostgreSQL
// restarted, the primary killed and the standby promoted — and then
// compares what the clients were told with what the database holds. The
// database may instead be run by a fail-over manager (Config.Database),
// whose faults the run then injects.
package chaos

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// The faults a run can inject.
const (
	AgqKill            = "agq-kill"
	WorkerKill         = "worker-kill"
	WorkerStop         = "worker-stop"
	PostgresFast       = "pg-restart-fast"
	PostgresImmediate  = "pg-restart-immediate"
	PrimaryFailover    = "failover"
	heartbeatInterval  = time.Second
	ackTimeout         = 2 * time.Second
	recoveryLimit      = 60 * time.Second
	queue              = "chaos"
	workerStopDuration = 3*heartbeatInterval + 2*time.Second
	// workTime is how long a worker holds each job: long enough that a
	// stopped or killed worker is often caught holding one.
	workTime = 20 * time.Millisecond
)

// AllFaults is every kind of fault, in the order a run cycles through them.
var AllFaults = []string{AgqKill, WorkerKill, WorkerStop, PostgresFast, PostgresImmediate, PrimaryFailover}

// Config configures a run.
type Config struct {
	AgqBin string
	// WorkerCommand runs one worker; -addr, -id, -key, -queue,
	// -heartbeat and -work flags are added, and with TLS
	// -tls-ca-cert-file, -tls-cert-file and -tls-key-file.
	WorkerCommand []string
	// Dir holds the clusters and the logs.
	Dir                       string
	Nodes, Workers, Producers int
	// Rate is submissions per second, in all.
	Rate int
	// Duration is how long faults are injected (each kind at least once).
	Duration time.Duration
	Faults   []string
	// StuckAfter is how long, once submissions stop, the unfinished
	// acknowledged jobs may go without any of them moving before they are
	// called stuck. Jobs being worked off are waited for however long.
	StuckAfter time.Duration
	// Fsync keeps PostgreSQL's fsync on (off makes short runs faster;
	// process kills do not lose what the operating system holds).
	Fsync bool
	// NoStandby runs a single PostgreSQL, without fail-over.
	NoStandby bool
	// Workflows submits graphs of step jobs that sleep, wait for signals
	// or spawn and await children, instead of plain jobs (see workflow.go).
	Workflows bool
	// TLS runs the nodes with only a TLS listener that requires a client
	// certificate, and every worker and producer connects over it.
	TLS bool
	// Database, if set, is PostgreSQL run by someone else (an HA manager):
	// no cluster of our own is started, and faults other than agq's and
	// the workers' are the database's.
	Database Database
	Progress io.Writer
}

// Database is PostgreSQL run by something other than the chaos run.
type Database interface {
	// URL is agq's database URL.
	URL() string
	// Fault injects the named fault and returns once it is under way.
	Fault(ctx context.Context, fault string) error
	// Heal returns once the database is whole again after a fault, ready
	// for the next.
	Heal(ctx context.Context) error
}

type run struct {
	cfg      Config
	db       *database // nil with Config.Database
	url      string    // agq's database URL
	nodes    []*process
	addrs    []string
	workers  []*process
	adminKey string
	ledger   *ledger
	tlsFiles TLSFiles
	tlsConf  *tls.Config // nil without TLS
	started  time.Time
	say      func(format string, args ...any)
}

// Run runs the chaos and returns what it found.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r := &run{cfg: cfg, ledger: newLedger(cfg.Nodes), started: time.Now()}
	r.say = func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "chaos %5.1fs: %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
	}
	if cfg.Database != nil {
		r.url = cfg.Database.URL()
	} else {
		pgLog, err := os.Create(logPath(cfg.Dir, "pgcluster"))
		if err != nil {
			return nil, err
		}
		defer pgLog.Close()
		db, err := startDatabase(ctx, cfg.Dir, postgresSettings(cfg), !cfg.NoStandby, zerolog.New(pgLog))
		if db != nil {
			defer db.close()
		}
		if err != nil {
			return nil, fmt.Errorf("starting PostgreSQL: %w", err)
		}
		r.db, r.url = db, db.url
	}
	r.say("PostgreSQL ready (%s)", r.url)
	if cfg.TLS {
		if err := r.makeTLS(); err != nil {
			return nil, err
		}
	}
	defer r.stopAll()
	if err := r.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := r.startWorkers(ctx); err != nil {
		return nil, err
	}
	rep := &Report{TLS: cfg.TLS, Workflows: cfg.Workflows, SubmitRate: cfg.Rate, WorkerCapacity: float64(cfg.Workers) * float64(time.Second) / float64(workTime), StuckAfter: cfg.StuckAfter}
	r.say("%d workers can take at most %.0f jobs/s (each runs one job at a time, %s each); submitting %d/s",
		cfg.Workers, rep.WorkerCapacity, workTime, cfg.Rate)
	r.submitUnderFaults(ctx, rep)
	return r.settle(ctx, rep)
}

// postgresSettings are the settings of the cluster a run starts itself.
func postgresSettings(cfg Config) map[string]string {
	settings := map[string]string{
		"synchronous_commit":          "on",
		"wal_retrieve_retry_interval": "200ms",
		"max_connections":             "300",
	}
	if !cfg.Fsync {
		settings["fsync"], settings["full_page_writes"] = "off", "off"
	}
	return settings
}

// makeTLS writes the run's certificates and builds the clients' TLS config.
func (r *run) makeTLS() (err error) {
	if r.tlsFiles, err = makeTLSFiles(r.cfg.Dir); err != nil {
		return fmt.Errorf("making TLS certificates: %w", err)
	}
	if r.tlsConf, err = clientTLS(r.tlsFiles.CA, r.tlsFiles.ClientCert, r.tlsFiles.ClientKey); err != nil {
		return err
	}
	return nil
}

// submitUnderFaults runs the producers and probes while it injects the
// faults, each kind at least once and for at least cfg.Duration, then stops
// them.
func (r *run) submitUnderFaults(ctx context.Context, rep *Report) {
	workersUp := time.Now()
	prodCtx, stopProducers := context.WithCancel(ctx)
	producers := r.startProducers(ctx, prodCtx)
	probes := r.startProbes(prodCtx)

	faults := r.cfg.Faults
	if len(faults) == 0 {
		faults = AllFaults
	}
	time.Sleep(2 * time.Second) // steady flow before the first fault
	for i := 0; ctx.Err() == nil && (i < len(faults) || time.Since(r.started) < r.cfg.Duration); i++ {
		rep.Faults = append(rep.Faults, r.inject(ctx, faults[i%len(faults)], i))
		time.Sleep(time.Second)
	}
	stopProducers()
	producers.Wait()
	probes.Wait()
	rep.CompletionRate = float64(r.ledger.completions()) / time.Since(workersUp).Seconds()
	r.say("producers stopped; %d submissions acknowledged; workers completed %.0f jobs/s meanwhile; waiting for the rest to finish",
		len(r.ledger.ackedIDs()), rep.CompletionRate)
}

// settle waits for the acknowledged jobs to finish, stops the workers and
// checks the database against what the clients were told.
func (r *run) settle(ctx context.Context, rep *Report) (*Report, error) {
	conn, err := r.connectPrimary(ctx)
	if err != nil {
		return rep, err
	}
	defer conn.Close(context.Background())
	rep.Drain = r.drain(ctx, conn, r.ledger.ackedIDs())
	r.stopWorkers()
	err = r.ledger.account(ctx, conn, rep)
	rep.Elapsed = time.Since(r.started)
	return rep, err
}

func (r *run) connectPrimary(ctx context.Context) (*pgx.Conn, error) {
	var err error
	for start := time.Now(); time.Since(start) < recoveryLimit; time.Sleep(200 * time.Millisecond) {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, r.url); err == nil {
			return conn, nil
		}
	}
	return nil, fmt.Errorf("reaching the primary: %w", err)
}

func (r *run) startNodes(ctx context.Context) error {
	key := make([]byte, 32)
	rand.Read(key)
	r.adminKey = hex.EncodeToString(key)
	// Chosen all at once: a port closed after one pick could be picked again.
	addrs := freeAddrs(2 * r.cfg.Nodes)
	for i := range r.cfg.Nodes {
		addr, httpAddr := addrs[2*i], addrs[2*i+1]
		dir := fmt.Sprintf("%s/agq%d", r.cfg.Dir, i)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		listen := []string{"--listen", addr}
		if r.cfg.TLS {
			listen = []string{"--listen", "off", "--tls-listen", addr, "--tls-cert-file", r.tlsFiles.Cert,
				"--tls-key-file", r.tlsFiles.Key, "--tls-ca-cert-file", r.tlsFiles.CA, "--tls-auth-clients", "yes"}
		}
		p := &process{name: fmt.Sprintf("agq%d", i), log: logPath(r.cfg.Dir, fmt.Sprintf("agq%d", i)), args: append([]string{
			r.cfg.AgqBin, "--http-listen", httpAddr, "--database-url", r.url,
			"--data-dir", dir, "--admin-key", r.adminKey, "--log-level", "warn", "--log-format", "json",
			"--heartbeat-interval", strconv.Itoa(int(heartbeatInterval.Seconds())) + "s", "--ack-timeout", ackTimeout.String(),
		}, listen...)}
		if err := p.start(); err != nil {
			return err
		}
		r.nodes, r.addrs = append(r.nodes, p), append(r.addrs, addr)
	}
	for i, addr := range r.addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: r.adminKey, MaxRetries: -1, TLSConfig: r.tlsConf})
		err := waitFor(ctx, 30*time.Second, func() error { return c.Ping(ctx).Err() })
		c.Close()
		if err != nil {
			return fmt.Errorf("agq node %d did not answer (log %s): %w", i, r.nodes[i].log, err)
		}
	}
	r.say("%d agq nodes up", len(r.nodes))
	return nil
}

func (r *run) admin(node int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.addrs[node], Password: r.adminKey, MaxRetries: -1, TLSConfig: r.tlsConf,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
}

func (r *run) startWorkers(ctx context.Context) error {
	admin := r.admin(0)
	defer admin.Close()
	for i := range r.cfg.Workers {
		id, node := fmt.Sprintf("cw-%d", i), i%r.cfg.Nodes
		worker := i
		key, err := admin.Do(ctx, "KEY.CREATE", "worker", id).Text()
		if err != nil {
			return fmt.Errorf("KEY.CREATE: %w", err)
		}
		args := append(append([]string{}, r.cfg.WorkerCommand...), "-addr", r.addrs[node], "-id", id, "-key", key,
			"-queue", queue, "-heartbeat", heartbeatInterval.String(), "-work", workTime.String())
		if r.cfg.Workflows {
			args = append(args, "-workflows")
		}
		if r.cfg.TLS {
			args = append(args, "-tls-ca-cert-file", r.tlsFiles.CA, "-tls-cert-file", r.tlsFiles.ClientCert, "-tls-key-file", r.tlsFiles.ClientKey)
		}
		p := &process{name: id, log: logPath(r.cfg.Dir, id), args: args,
			lines: func(line string) { r.ledger.workerLine(worker, node, line) }}
		if err := p.start(); err != nil {
			return err
		}
		r.workers = append(r.workers, p)
	}
	r.say("%d workers up", len(r.workers))
	return nil
}

// startProducers submits jobs at the configured rate, each to the next
// node, re-sending a submission by its id until it is acknowledged, until
// ctx ends. In a workflow run it also sends the signals the jobs it
// submitted wait for: those outlive ctx (runCtx bounds them), so that no
// job acknowledged waits for a signal never sent.
func (r *run) startProducers(runCtx, ctx context.Context) *sync.WaitGroup {
	tokens := make(chan struct{}, r.cfg.Producers)
	go func() {
		t := time.NewTicker(time.Second / time.Duration(max(1, r.cfg.Rate)))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case tokens <- struct{}{}:
				default: // the producers are behind: that is an error to see, not to queue
				}
			}
		}
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	signalers := make([]*redis.Client, len(r.addrs))
	for i := range signalers {
		signalers[i] = r.admin(i)
	}
	for p := range r.cfg.Producers {
		wg.Go(func() {
			clients := make([]*redis.Client, len(r.addrs))
			for i := range clients {
				clients[i] = r.admin(i)
				defer clients[i].Close()
			}
			for n := p; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-tokens:
				}
				seq := next.Add(1)
				id := fmt.Sprintf("chaos-%07d", seq)
				doc, ids := fmt.Sprintf(`{"job_id":%q,"queue":%q,"type":"chaos","max_attempts":100}`, id, queue), []string{id}
				if r.cfg.Workflows {
					doc, ids = flowGraph(id, flowKind(seq))
				}
				// After an error the next node is tried.
				for try, wait := n, time.Duration(0); sleep(ctx, wait); try, wait = try+1, backoff(wait) {
					err := clients[try%len(clients)].Do(ctx, "JOB.SUBMIT", doc).Err()
					if err == nil {
						for _, id := range ids {
							r.ledger.ack(id)
						}
						if r.cfg.Workflows && signalled(flowKind(seq)) {
							wg.Go(func() { r.sendSignal(runCtx, signalers, id, seq) })
						}
						break
					}
					if ctx.Err() == nil {
						r.ledger.clientErr("submit", err.Error())
					}
				}
			}
		})
	}
	// Done once the producers and the signals they sent are.
	var done sync.WaitGroup
	done.Go(func() {
		wg.Wait()
		for _, c := range signalers {
			c.Close()
		}
	})
	return &done
}

// inject runs one fault and waits until it is recovered from: a worker of
// every node had a completion accepted again, and a node leads (runs the
// watchdog and the scheduler).
func (r *run) inject(ctx context.Context, kind string, round int) FaultResult {
	res := FaultResult{Kind: kind, At: time.Since(r.started)}
	start := time.Now()
	r.say("fault: %s", kind)
	var err error
	after := func() {}
	switch kind {
	case AgqKill:
		n := r.nodes[round%len(r.nodes)]
		n.kill()
		err = n.start()
	case WorkerKill:
		w := r.workers[round%len(r.workers)]
		w.kill()
		err = w.start()
	case WorkerStop:
		// Stopped while it runs a job, it resumes after its heartbeats
		// ran out and the job went to another: its report is then stale.
		// The others carry on meanwhile.
		w := r.workers[round%len(r.workers)]
		r.stopHolding(ctx, round%len(r.workers))
		start = time.Now()
		after = func() {
			time.Sleep(time.Until(start.Add(workerStopDuration)))
			w.signal(syscall.SIGCONT)
		}
	case PostgresFast, PostgresImmediate, PrimaryFailover:
		if r.db == nil {
			err = fmt.Errorf("fault %s needs the run's own PostgreSQL", kind)
			break
		}
		if kind != PrimaryFailover {
			err = r.db.restart(ctx, kind == PostgresImmediate)
			break
		}
		if err = r.db.failover(ctx); err == nil {
			r.say("standby promoted %.2fs after the kill", time.Since(start).Seconds())
		}
		after = func() {
			if err := r.db.rebuildStandby(ctx); err != nil {
				r.say("rebuilding the standby: %v", err)
			}
		}
	default:
		if r.cfg.Database == nil {
			err = fmt.Errorf("unknown fault %q", kind)
			break
		}
		err = r.cfg.Database.Fault(ctx, kind)
		after = func() {
			if err := r.cfg.Database.Heal(ctx); err != nil {
				res.Error = fmt.Sprintf("healing the database: %v", err)
				r.say("healing the database after %s: %v", kind, err)
			}
		}
	}
	if err != nil {
		res.Error = err.Error()
		r.say("fault %s: %v", kind, err)
	}
	for time.Since(start) < recoveryLimit && ctx.Err() == nil {
		if r.ledger.allNodesDoneSince(start) && r.someNodeLeads(ctx) {
			res.Recovered, res.Recovery = true, time.Since(start)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.WritePause = r.ledger.longestWritePause(start, time.Now())
	r.say("%s: recovered=%v in %.2fs; writes paused %.2fs", kind, res.Recovered, res.Recovery.Seconds(), res.WritePause.Seconds())
	after()
	return res
}

// someNodeLeads reports whether a node says it is the leader.
func (r *run) someNodeLeads(ctx context.Context) bool {
	for i := range r.addrs {
		c := r.admin(i)
		info, err := c.Info(ctx, "leader").Result()
		c.Close()
		if err == nil && strings.Contains(info, "is_leader:1") {
			return true
		}
	}
	return false
}

func (r *run) stopWorkers() {
	for _, w := range r.workers {
		w.stop(5 * time.Second)
	}
}

func (r *run) stopAll() {
	r.stopWorkers()
	for _, n := range r.nodes {
		n.stop(15 * time.Second)
	}
}

func waitFor(ctx context.Context, limit time.Duration, cond func() error) error {
	err := errors.New("not tried")
	for start := time.Now(); time.Since(start) < limit && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		if err = cond(); err == nil {
			return nil
		}
	}
	return err
}

// freeAddrs returns n distinct loopback addresses free a moment ago.
func freeAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		defer ln.Close()
		out[i] = ln.Addr().String()
	}
	return out
}

// stopHolding stops worker i while it holds a job its report has not
// finished yet: stopped a moment too late — its report already sent, or
// its job already done by the time the signal landed — it goes on and is
// stopped again at its next job, for up to ten seconds.
func (r *run) stopHolding(ctx context.Context, i int) {
	w := r.workers[i]
	for deadline := time.Now().Add(10 * time.Second); ; {
		h, ok := r.ledger.holdingNow(i)
		for ; !ok && time.Now().Before(deadline); h, ok = r.ledger.holdingNow(i) {
			time.Sleep(time.Millisecond)
		}
		w.signal(syscall.SIGSTOP)
		if !ok || time.Now().After(deadline) {
			return
		}
		// Whatever it printed before the stop reaches the ledger, and a
		// report it sent reaches the database, meanwhile.
		time.Sleep(100 * time.Millisecond)
		if now, still := r.ledger.holdingNow(i); still && now == h && r.stillRunning(ctx, h) {
			return
		}
		w.signal(syscall.SIGCONT)
	}
}

// stillRunning reports whether the database still has h's job running for
// that delivery (false also when it cannot tell).
func (r *run) stillRunning(ctx context.Context, h held) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var running bool
	err = conn.QueryRow(ctx, `SELECT status = 'running' AND delivery::text = $2 FROM jobs WHERE id = $1`, h.job, h.delivery).Scan(&running)
	return err == nil && running
}
