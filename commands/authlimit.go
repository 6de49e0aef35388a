package commands

import (
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Failed AUTHs are limited per source address as well as per connection:
// reconnecting must not buy an attacker fresh attempts. Each address may
// fail authFailBurst times at once, then authFailRate times a second; a
// failure beyond that is answered only when its turn comes, and one that
// would wait longer than authFailMaxWait closes its connection at once.
// Successful authentications are never delayed.
const (
	authFailRate  = 10
	authFailBurst = 10
	// Under go-redis's default 3 s read timeout: a client with a wrong key
	// sees WRONGPASS, not a timeout.
	authFailMaxWait = 2 * time.Second
	// authFailLogEvery is how often an address's failures are logged, as
	// one summary line.
	authFailLogEvery = 10 * time.Second
	// authFailAddrs bounds the addresses remembered.
	authFailAddrs = 10000
)

// authLimiter is a per-address rate limit on failed AUTHs (a generic cell
// rate algorithm: each address's theoretical arrival time).
type authLimiter struct {
	log zerolog.Logger
	mu  sync.Mutex
	by  map[string]*addrFailures
}

type addrFailures struct {
	tat      time.Time // when the address's next failure is due, at the allowed rate
	unlogged int
	loggedAt time.Time
}

func newAuthLimiter(log zerolog.Logger) *authLimiter {
	return &authLimiter{log: log, by: map[string]*addrFailures{}}
}

// failed records a failed AUTH from remote (host:port) and returns how long
// to wait before answering it, or ok false when the connection should be
// closed instead.
func (l *authLimiter) failed(remote string) (wait time.Duration, ok bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.by[host]
	if f == nil {
		l.makeRoom(now)
		f = &addrFailures{tat: now, loggedAt: now}
		l.by[host] = f
	}
	interval := time.Second / authFailRate
	tat := f.tat
	if tat.Before(now) {
		tat = now
	}
	wait = tat.Add(interval).Sub(now) - authFailBurst*interval
	if wait > authFailMaxWait {
		ok = false
	} else {
		f.tat, ok = tat.Add(interval), true
	}
	f.unlogged++
	if now.Sub(f.loggedAt) >= authFailLogEvery || f.unlogged == 1 {
		l.log.Warn().Str("addr", host).Int("failures", f.unlogged).Dur("since", now.Sub(f.loggedAt)).
			Msg("failed authentications from one address")
		f.unlogged, f.loggedAt = 0, now
	}
	return max(wait, 0), ok
}

// makeRoom forgets addresses quiet for a minute when the map is full, and
// if none is, an arbitrary one: memory stays bounded whatever the number of
// addresses an attacker uses.
func (l *authLimiter) makeRoom(now time.Time) {
	if len(l.by) < authFailAddrs {
		return
	}
	for host, f := range l.by {
		if now.Sub(f.tat) > time.Minute {
			delete(l.by, host)
		}
	}
	for host := range l.by {
		if len(l.by) < authFailAddrs {
			break
		}
		delete(l.by, host)
	}
}
