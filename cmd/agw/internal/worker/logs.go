package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/client"
)

// A job's output lines go to agq as they come (PUBLISH job.<id>.logs), for
// whoever follows the job live and for JOB.LOGS later — bounded, so that a
// chatty tool never slows its job or agq: at most logRate lines a second
// (logBurst at once) and logQueue waiting; lines past that are dropped, and
// how many is said when lines flow again.
const (
	logRate  = 50
	logBurst = 200
	logQueue = 256
	// logDrain bounds how long a finished job's last lines may take to go,
	// before its final report (after which agq refuses them).
	logDrain = 2 * time.Second
)

type logLines struct {
	job     *client.Job
	log     zerolog.Logger
	q       chan string
	dropped atomic.Int64
	done    chan struct{}

	mu     sync.Mutex
	tokens float64
	last   time.Time
	closed bool // no more lines: a tool that left its process group may still write
}

func newLogLines(j *client.Job, log zerolog.Logger) *logLines {
	l := &logLines{job: j, log: log, q: make(chan string, logQueue), done: make(chan struct{}),
		tokens: logBurst, last: time.Now()}
	go l.run()
	return l
}

// line takes one line of output; it never blocks.
func (l *logLines) line(task int, stderr bool, s string) {
	if stderr {
		s = fmt.Sprintf("[task %d stderr] %s", task, s)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if !l.take() {
		l.dropped.Add(1)
		return
	}
	select {
	case l.q <- s:
	default:
		l.dropped.Add(1)
	}
}

// take spends a token of the rate limit; l.mu is held.
func (l *logLines) take() bool {
	now := time.Now()
	l.tokens = min(logBurst, l.tokens+now.Sub(l.last).Seconds()*logRate)
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

func (l *logLines) run() {
	defer close(l.done)
	for s := range l.q {
		if n := l.dropped.Swap(0); n > 0 {
			l.publish(fmt.Sprintf("[agw: %d lines dropped]", n))
		}
		l.publish(s)
	}
	if n := l.dropped.Swap(0); n > 0 {
		l.publish(fmt.Sprintf("[agw: %d lines dropped]", n))
	}
}

func (l *logLines) publish(s string) {
	ctx, cancel := context.WithTimeout(context.Background(), logDrain)
	defer cancel()
	if err := l.job.Log(ctx, s); err != nil {
		l.log.Debug().Err(err).Str("job_id", l.job.ID()).Msg("publishing a log line")
	}
}

// close sends what is queued, waiting at most logDrain.
func (l *logLines) close() {
	l.mu.Lock()
	l.closed = true
	close(l.q)
	l.mu.Unlock()
	select {
	case <-l.done:
	case <-time.After(logDrain):
	}
}
