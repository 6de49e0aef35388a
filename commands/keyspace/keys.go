package keyspace

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Liveness windows, in heartbeat intervals: a worker is dead after three
// missed intervals, and the seed keeps stats 120 s at the default 30 s.
const (
	aliveIntervals = 3
	statsIntervals = 4
)

// noExpiry is the TTL of a key that does not expire.
const noExpiry time.Duration = -1

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
