package commands

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// The keyspace is a read-only view of the tables, shaped like the keys of
// the seed protocol so that an administrator's redis-cli habits work:
//
//	worker:<id>:alive          string  last heartbeat (unix s); TTL to 3 intervals after it
//	worker:<id>:metadata       string  the registration JSON
//	worker:<id>:stats          string  the last heartbeat's stats; TTL to 4 intervals after it
//	capability:<name>:workers  set     ACTIVE workers offering <name>
//	queue:<name>               list    the claimable jobs (LLEN, LRANGE in queues.go)
//	job:<id>                   string  the job JSON, as JOB.GET
//	job:<id>:worker            string  the running job's worker; TTL to its deadline
//
// Keys come and go with the rows: nothing is stored for them.

// Liveness windows, in heartbeat intervals: a worker is dead after three
// missed intervals, and the seed keeps stats 120 s at the default 30 s.
const (
	aliveIntervals = 3
	statsIntervals = 4
)

// noExpiry is the TTL of a key that does not expire.
const noExpiry time.Duration = -1

var errWrongType = resp.CodeErrorf("WRONGTYPE", "Operation against a key holding the wrong kind of value")

type keyKind int

const (
	kindCapability keyKind = iota
	kindWorkerAlive
	kindWorkerMetadata
	kindWorkerStats
	kindQueue
	kindJob
	kindJobWorker
	kindCount
)

// keyFamily is the shape of a kind of key: head + name + tail.
type keyFamily struct {
	head, tail string
	// typ is what TYPE answers.
	typ string
	// colonInName: capability names may hold ':'; ids and queue names not.
	colonInName bool
}

var keyFamilies = [kindCount]keyFamily{
	kindCapability:     {head: "capability:", tail: ":workers", typ: "set", colonInName: true},
	kindWorkerAlive:    {head: "worker:", tail: ":alive", typ: "string"},
	kindWorkerMetadata: {head: "worker:", tail: ":metadata", typ: "string"},
	kindWorkerStats:    {head: "worker:", tail: ":stats", typ: "string"},
	kindQueue:          {head: "queue:", typ: "list"},
	kindJob:            {head: "job:", typ: "string"},
	kindJobWorker:      {head: "job:", tail: ":worker", typ: "string"},
}

var (
	anyByte     = allBytesBut()
	anyButColon = allBytesBut(':')
)

func (f keyFamily) nameBytes() *byteSet {
	if f.colonInName {
		return &anyByte
	}
	return &anyButColon
}

// parseKey finds the family and name of a key; ok is false for a key that
// no table can hold.
func parseKey(key string) (keyKind, string, bool) {
	for kind, f := range keyFamilies {
		name, ok := strings.CutPrefix(key, f.head)
		if !ok {
			continue
		}
		// A name with NUL or invalid UTF-8 cannot be stored: no key has it.
		if name, ok = strings.CutSuffix(name, f.tail); ok && name != "" && (f.colonInName || !strings.Contains(name, ":")) &&
			utf8.ValidString(name) && !strings.ContainsRune(name, 0) {
			return keyKind(kind), name, true
		}
	}
	return 0, "", false
}

// keyValue is what a key holds now.
type keyValue struct {
	// typ is "string", "list" or "set"; "" when the key does not exist.
	typ     string
	str     []byte
	members []string
	ttl     time.Duration
}

// keyspace serves the keyspace commands; it holds the SCAN resume memo.
type keyspace struct {
	s      *Server
	resume *resumeMemo
}

// keyspaceCommands are the read-only views of the tables for redis-cli
// (KEYS, SCAN, GET, TTL, EXISTS, TYPE, SMEMBERS…) and the refusal of writes.
func (s *Server) keyspaceCommands() []*Command {
	ks := &keyspace{s: s, resume: newResumeMemo(4096)}
	cmds := []*Command{
		{Name: "keys", Arity: 2, Roles: readers, Handler: ks.cmdKeys},
		{Name: "scan", Arity: -2, Roles: readers, Handler: ks.cmdScan},
		{Name: "dbsize", Arity: 1, Roles: readers, Handler: ks.cmdDBSize},
		{Name: "get", Arity: 2, Roles: readers, Handler: ks.cmdGet},
		{Name: "strlen", Arity: 2, Roles: readers, Handler: ks.cmdStrlen},
		{Name: "ttl", Arity: 2, Roles: readers, Handler: ks.cmdTTL},
		{Name: "pttl", Arity: 2, Roles: readers, Handler: ks.cmdTTL},
		{Name: "exists", Arity: -2, Roles: readers, Handler: ks.cmdExists},
		{Name: "type", Arity: 2, Roles: readers, Handler: ks.cmdType},
		{Name: "smembers", Arity: 2, Roles: readers, Handler: ks.cmdSMembers},
		{Name: "scard", Arity: 2, Roles: readers, Handler: ks.cmdSCard},
	}
	for _, name := range refusedWrites {
		cmds = append(cmds, &Command{Name: name, Arity: -1, Roles: anyRole, Handler: refuseWrite})
	}
	return cmds
}

// refusedWrites are the Redis commands that would change keys. LPUSH
// queue:<name> is the one write agq takes (jobs.go); RPOP, BRPOP, LMPOP and
// BLMPOP are workers' pops.
var refusedWrites = []string{
	"set", "setex", "psetex", "setnx", "setrange", "mset", "msetnx", "getset", "getdel", "getex",
	"append", "incr", "incrby", "incrbyfloat", "decr", "decrby",
	"del", "unlink", "expire", "pexpire", "expireat", "pexpireat", "persist", "rename", "renamenx",
	"copy", "restore", "migrate", "move", "swapdb", "flushdb", "flushall",
	"rpush", "lpushx", "rpushx", "lpop", "lset", "lrem", "ltrim", "linsert",
	"rpoplpush", "brpoplpush", "lmove", "blmove", "blpop",
	"sadd", "srem", "spop", "smove", "sinterstore", "sunionstore", "sdiffstore",
	"hset", "hsetnx", "hmset", "hdel", "hincrby", "hincrbyfloat", "hgetdel", "hgetex", "hsetex",
	"zadd", "zrem", "zincrby", "zpopmin", "zpopmax", "bzpopmin", "bzpopmax", "zmpop", "bzmpop",
	"zremrangebyscore", "zremrangebyrank", "zremrangebylex",
	"zunionstore", "zinterstore", "zdiffstore", "zrangestore",
	"setbit", "bitop", "bitfield", "pfadd", "pfmerge", "geoadd",
	"xadd", "xdel", "xtrim", "xack", "xclaim", "xautoclaim", "xsetid", "xgroup",
}

// SET, DEL, EXPIRE… key … — every write but LPUSH queue:<name>.
func refuseWrite(context.Context, *Session, [][]byte) (resp.Reply, error) {
	return nil, resp.ErrReadOnlyKeys
}

// GET key
func (ks *keyspace) cmdGet(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), true)
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
func (ks *keyspace) cmdStrlen(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), true)
	switch {
	case err != nil:
		return nil, err
	case v.typ != "" && v.typ != "string":
		return nil, errWrongType
	}
	return resp.Int(len(v.str)), nil
}

// TTL key, PTTL key — seconds (milliseconds) to live; -2 for a key that
// does not exist, -1 for one that does not expire.
func (ks *keyspace) cmdTTL(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), false)
	switch {
	case err != nil:
		return nil, err
	case v.typ == "":
		return resp.Int(-2), nil
	case v.ttl == noExpiry:
		return resp.Int(-1), nil
	case resp.Is(args[0], "pttl"):
		return resp.Int(v.ttl.Milliseconds()), nil
	}
	return resp.Int((v.ttl.Milliseconds() + 500) / 1000), nil // rounded, as Redis does
}

// EXISTS key [key …] — how many of the keys exist, each counted as often
// as it is given.
func (ks *keyspace) cmdExists(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	n := 0
	for _, key := range args[1:] {
		v, err := ks.lookup(ctx, string(key), false)
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
func (ks *keyspace) cmdType(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), false)
	if err != nil {
		return nil, err
	}
	return resp.SimpleString(cmp.Or(v.typ, "none")), nil
}

// SMEMBERS key — the members, sorted.
func (ks *keyspace) cmdSMembers(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), true)
	switch {
	case err != nil:
		return nil, err
	case v.typ != "" && v.typ != "set":
		return nil, errWrongType
	}
	return resp.StringArray(v.members), nil
}

// SCARD key
func (ks *keyspace) cmdSCard(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	v, err := ks.lookup(ctx, string(args[1]), true)
	switch {
	case err != nil:
		return nil, err
	case v.typ != "" && v.typ != "set":
		return nil, errWrongType
	}
	return resp.Int(len(v.members)), nil
}

// lookup reads what key holds now. Without withValue a job:<id> key is only
// probed, not read with its documents (EXISTS, TYPE, TTL).
func (ks *keyspace) lookup(ctx context.Context, key string, withValue bool) (keyValue, error) {
	kind, name, ok := parseKey(key)
	if !ok {
		return keyValue{}, nil
	}
	st := ks.s.eng
	switch kind {
	case kindCapability:
		ids, err := st.KeyspaceCapabilityMembers(ctx, name)
		if err != nil || len(ids) == 0 {
			return keyValue{}, err
		}
		return keyValue{typ: "set", members: ids, ttl: noExpiry}, nil
	case kindWorkerAlive, kindWorkerMetadata, kindWorkerStats:
		w, err := st.KeyspaceWorker(ctx, name)
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
	case kindQueue:
		n, err := st.QueueDepth(ctx, name)
		if err != nil || n == 0 {
			return keyValue{}, err
		}
		return keyValue{typ: "list", ttl: noExpiry}, nil
	case kindJob:
		if !withValue {
			_, err := st.KeyspaceJobProbe(ctx, name)
			if err != nil {
				return keyValue{}, notFoundIsMissing(err)
			}
			return keyValue{typ: "string", ttl: noExpiry}, nil
		}
		j, err := st.JobGet(ctx, name)
		if err != nil {
			return keyValue{}, notFoundIsMissing(err)
		}
		return keyValue{typ: "string", str: jobGetJSON(j), ttl: noExpiry}, nil
	default: // kindJobWorker
		j, err := st.KeyspaceJobProbe(ctx, name)
		if err != nil || j.Holder == "" {
			return keyValue{}, notFoundIsMissing(err)
		}
		return keyValue{typ: "string", str: []byte(j.Holder), ttl: holderTTL(j)}, nil
	}
}

// workerKeyTTL says whether a worker has the key of the given kind now,
// and its time to live.
func (ks *keyspace) workerKeyTTL(w records.KeyspaceWorker, kind keyKind) (time.Duration, bool) {
	interval := ks.s.eng.HeartbeatInterval()
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
