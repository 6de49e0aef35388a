// Package keyspace shows agq's tables as the Redis keys an administrator's
// redis-cli habits expect, read-only and computed when asked:
//
//	worker:<id>:alive          string  last heartbeat (unix s); TTL to 3 intervals after it
//	worker:<id>:metadata       string  the registration JSON
//	worker:<id>:stats          string  the last heartbeat's stats; TTL to 4 intervals after it
//	capability:<name>:workers  set     ACTIVE workers offering <name>
//	queue:<name>               list    the claimable jobs (LLEN and LRANGE are queue commands)
//	job:<id>                   string  the job JSON, as JOB.GET
//	job:<id>:worker            string  the running job's worker; TTL to its deadline
//
// Keys come and go with the rows: nothing is stored for them. They are the
// rows of one namespace, the reading engine's (Keyspace.In). The package
// answers GET, STRLEN, TTL, PTTL, EXISTS, TYPE, SMEMBERS, SCARD, KEYS, SCAN
// and DBSIZE with replies; package commands registers them.
package keyspace

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

var errWrongType = resp.CodeErrorf("WRONGTYPE", "Operation against a key holding the wrong kind of value")

// Reader is what the keyspace asks of the engine: its reads, the
// heartbeat interval, which sets how long a worker's keys live, and the
// namespace it reads.
type Reader interface {
	api.Reads
	HeartbeatInterval() time.Duration
	Namespace() string
}

// Keyspace answers the keyspace commands; it holds the SCAN resume memo.
type Keyspace struct {
	eng     Reader
	jobJSON func(records.Job) []byte
	resume  *resumeMemo
}

// New returns the keyspace over eng. jobJSON is the job as JOB.GET shows
// it, which GET job:<id> shows too. Nothing is read before a command.
func New(eng Reader, jobJSON func(records.Job) []byte) *Keyspace {
	return &Keyspace{eng: eng, jobJSON: jobJSON, resume: newResumeMemo(4096)}
}

// In is the keyspace read through eng, of eng's namespace: a session's
// own. It shares the SCAN resume memo, whose cursors are each
// namespace's.
func (ks *Keyspace) In(eng Reader) *Keyspace {
	return &Keyspace{eng: eng, jobJSON: ks.jobJSON, resume: ks.resume}
}

// GET key
func (ks *Keyspace) Get(ctx context.Context, key string) (resp.Reply, error) {
	v, err := ks.lookup(ctx, key, true)
	switch {
	case err != nil:
		return nil, err
	case v.typ == "":
		return resp.Nil, nil
	case v.typ != "string":
		return nil, errWrongType
	}
	return resp.Bulk(v.str), nil
}

// STRLEN key
func (ks *Keyspace) Strlen(ctx context.Context, key string) (resp.Reply, error) {
	v, err := ks.lookup(ctx, key, true)
	switch {
	case err != nil:
		return nil, err
	case v.typ != "" && v.typ != "string":
		return nil, errWrongType
	}
	return resp.Int(len(v.str)), nil
}

// TTL key — seconds to live, rounded as Redis does; -2 for a key that does
// not exist, -1 for one that does not expire.
func (ks *Keyspace) TTL(ctx context.Context, key string) (resp.Reply, error) {
	return ks.ttl(ctx, key, false)
}

// PTTL key — TTL in milliseconds.
func (ks *Keyspace) PTTL(ctx context.Context, key string) (resp.Reply, error) {
	return ks.ttl(ctx, key, true)
}

func (ks *Keyspace) ttl(ctx context.Context, key string, millis bool) (resp.Reply, error) {
	v, err := ks.lookup(ctx, key, false)
	switch {
	case err != nil:
		return nil, err
	case v.typ == "":
		return resp.Int(-2), nil
	case v.ttl == noExpiry:
		return resp.Int(-1), nil
	case millis:
		return resp.Int(v.ttl.Milliseconds()), nil
	}
	return resp.Int((v.ttl.Milliseconds() + 500) / 1000), nil
}

// EXISTS key [key …] — how many of the keys exist, each counted as often
// as it is given.
func (ks *Keyspace) Exists(ctx context.Context, keys ...string) (resp.Reply, error) {
	n := 0
	for _, key := range keys {
		v, err := ks.lookup(ctx, key, false)
		if err != nil {
			return nil, err
		}
		if v.typ != "" {
			n++
		}
	}
	return resp.Int(n), nil
}

// TYPE key
func (ks *Keyspace) Type(ctx context.Context, key string) (resp.Reply, error) {
	v, err := ks.lookup(ctx, key, false)
	if err != nil {
		return nil, err
	}
	return resp.SimpleString(cmp.Or(v.typ, "none")), nil
}

// SMEMBERS key — the members, sorted.
func (ks *Keyspace) SMembers(ctx context.Context, key string) (resp.Reply, error) {
	v, err := ks.set(ctx, key)
	if err != nil {
		return nil, err
	}
	return resp.StringArray(v.members), nil
}

// SCARD key
func (ks *Keyspace) SCard(ctx context.Context, key string) (resp.Reply, error) {
	v, err := ks.set(ctx, key)
	if err != nil {
		return nil, err
	}
	return resp.Int(len(v.members)), nil
}

// set reads a set key; a missing key reads as an empty set.
func (ks *Keyspace) set(ctx context.Context, key string) (keyValue, error) {
	v, err := ks.lookup(ctx, key, true)
	switch {
	case err != nil:
		return keyValue{}, err
	case v.typ != "" && v.typ != "set":
		return keyValue{}, errWrongType
	}
	return v, nil
}

// lookup reads what key holds now. Without withValue a job:<id> key is only
// probed, not read with its documents (EXISTS, TYPE, TTL).
func (ks *Keyspace) lookup(ctx context.Context, key string, withValue bool) (keyValue, error) {
	kind, name, ok := parseKey(key)
	if !ok {
		return keyValue{}, nil
	}
	switch kind {
	case kindCapability:
		ids, err := ks.eng.KeyspaceCapabilityMembers(ctx, name)
		if err != nil || len(ids) == 0 {
			return keyValue{}, err
		}
		return keyValue{typ: "set", members: ids, ttl: noExpiry}, nil
	case kindWorkerAlive, kindWorkerMetadata, kindWorkerStats:
		return ks.workerKey(ctx, kind, name)
	case kindQueue:
		n, err := ks.eng.QueueDepth(ctx, name)
		if err != nil || n == 0 {
			return keyValue{}, err
		}
		return keyValue{typ: "list", ttl: noExpiry}, nil
	case kindJob:
		if !withValue {
			_, err := ks.eng.KeyspaceJobProbe(ctx, name)
			if err != nil {
				return keyValue{}, notFoundIsMissing(err)
			}
			return keyValue{typ: "string", ttl: noExpiry}, nil
		}
		j, err := ks.eng.JobGet(ctx, name)
		if err != nil {
			return keyValue{}, notFoundIsMissing(err)
		}
		return keyValue{typ: "string", str: ks.jobJSON(j), ttl: noExpiry}, nil
	default: // kindJobWorker
		j, err := ks.eng.KeyspaceJobProbe(ctx, name)
		if err != nil || j.Holder == "" {
			return keyValue{}, notFoundIsMissing(err)
		}
		return keyValue{typ: "string", str: []byte(j.Holder), ttl: holderTTL(j)}, nil
	}
}

// workerKey reads one of a worker's keys.
func (ks *Keyspace) workerKey(ctx context.Context, kind keyKind, id string) (keyValue, error) {
	w, err := ks.eng.KeyspaceWorker(ctx, id)
	if err != nil {
		return keyValue{}, notFoundIsMissing(err)
	}
	ttl, ok := ks.workerKeyTTL(w, kind)
	if !ok {
		return keyValue{}, nil
	}
	v := keyValue{typ: "string", ttl: ttl}
	switch kind {
	case kindWorkerAlive:
		v.str = strconv.AppendInt(nil, w.LastHeartbeatAt.Unix(), 10)
	case kindWorkerMetadata:
		v.str = compactJSON(w.Metadata)
	default:
		v.str = compactJSON(w.Stats)
	}
	return v, nil
}

// workerKeyTTL says whether a worker has the key of the given kind now,
// and its time to live.
func (ks *Keyspace) workerKeyTTL(w records.KeyspaceWorker, kind keyKind) (time.Duration, bool) {
	interval := ks.eng.HeartbeatInterval()
	live := w.State == records.WorkerActive || w.State == records.WorkerDraining
	switch kind {
	case kindWorkerAlive:
		left := aliveIntervals*interval - w.SinceHeartbeat
		return left, live && left > 0
	case kindWorkerStats:
		left := statsIntervals*interval - w.SinceHeartbeat
		return left, w.State != records.WorkerUnregistered && w.HasStats && left > 0
	default: // kindWorkerMetadata
		return noExpiry, w.State != records.WorkerUnregistered
	}
}

// holderTTL is the time a job:<id>:worker key has left: until the job's
// deadline, its timeout.
func holderTTL(j records.KeyspaceJob) time.Duration {
	if j.UntilDeadline == nil {
		return noExpiry
	}
	return max(*j.UntilDeadline, time.Millisecond)
}

func notFoundIsMissing(err error) error {
	if errors.Is(err, records.ErrNotFound) {
		return nil
	}
	return err
}

// compactJSON drops the spaces jsonb puts in its text form.
func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
