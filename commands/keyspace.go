package commands

import (
	"context"
	"strconv"

	"github.com/agq/agq/commands/keyspace"
	"github.com/agq/agq/resp"
)

// keyspaceCommands are the read-only views of the tables for redis-cli
// (package keyspace answers them) and the refusal of writes. Each command
// reads the keyspace of the session's namespace (keyspace.In).
func (s *Server) keyspaceCommands() []*Command {
	ks := keyspace.New(s.eng, jobGetJSON)
	cmds := []*Command{
		{Name: "keys", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).Keys)},
		{Name: "scan", Arity: -2, Roles: readers, Handler: scanCommand(ks)},
		{Name: "dbsize", Arity: 1, Roles: readers, Handler: func(ctx context.Context, sess *Session, _ [][]byte) (resp.Reply, error) {
			return ks.In(sess.eng).DBSize(ctx)
		}},
		{Name: "get", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).Get)},
		{Name: "strlen", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).Strlen)},
		{Name: "ttl", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).TTL)},
		{Name: "pttl", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).PTTL)},
		{Name: "exists", Arity: -2, Roles: readers, Handler: existsCommand(ks)},
		{Name: "type", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).Type)},
		{Name: "smembers", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).SMembers)},
		{Name: "scard", Arity: 2, Roles: readers, Handler: oneKey(ks, (*keyspace.Keyspace).SCard)},
	}
	for _, name := range refusedWrites {
		cmds = append(cmds, &Command{Name: name, Arity: -1, Roles: anyRole, Handler: refuseWrite})
	}
	return cmds
}

// oneKey is the handler of a command whose one argument is a key or a
// pattern: GET, STRLEN, TTL, PTTL, TYPE, SMEMBERS, SCARD, KEYS.
func oneKey(ks *keyspace.Keyspace, read func(*keyspace.Keyspace, context.Context, string) (resp.Reply, error)) Handler {
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		return read(ks.In(sess.eng), ctx, string(args[1]))
	}
}

// EXISTS key [key …]
func existsCommand(ks *keyspace.Keyspace) Handler {
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		keys := make([]string, len(args)-1)
		for i, key := range args[1:] {
			keys[i] = string(key)
		}
		return ks.In(sess.eng).Exists(ctx, keys...)
	}
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
func scanCommand(ks *keyspace.Keyspace) Handler {
	return func(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
		a, err := parseScan(args)
		if err != nil {
			return nil, err
		}
		return ks.In(sess.eng).Scan(ctx, a)
	}
}

// parseScan reads SCAN's arguments, with Redis's defaults: every key, 10
// rows.
func parseScan(args [][]byte) (keyspace.ScanArgs, error) {
	a := keyspace.ScanArgs{Match: "*", Count: 10}
	var err error
	if a.Cursor, err = strconv.ParseUint(string(args[1]), 10, 64); err != nil {
		return a, resp.Errorf("invalid cursor")
	}
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return a, resp.ErrSyntax
		}
		switch v := string(args[i+1]); resp.Lower(args[i]) {
		case "match":
			a.Match = v
		case "type":
			a.Type = v
		case "count":
			if a.Count, err = resp.ParseInt(args[i+1]); err != nil {
				return a, resp.ErrNotInteger
			}
			if a.Count < 1 {
				return a, resp.ErrSyntax
			}
		default:
			return a, resp.ErrSyntax
		}
	}
	return a, nil
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
