package keyspace

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agq/agq/resp"
)

// keyRegion is a part of the keyspace listed from one table; KEYS and SCAN
// walk them in this order.
type keyRegion int

const (
	regionCapabilities keyRegion = iota // from workers
	regionWorkers
	regionQueues
	regionJobs
	regionCount
)

var regionKinds = [regionCount][]keyKind{
	regionCapabilities: {kindCapability},
	regionWorkers:      {kindWorkerAlive, kindWorkerMetadata, kindWorkerStats},
	regionQueues:       {kindQueue},
	regionJobs:         {kindJob, kindJobWorker},
}

// maxPatternLen bounds a pattern, which is compiled before use; no key is
// a tenth as long.
const maxPatternLen = 4096

// keyQuery is a KEYS or SCAN request: the pattern, and which families it
// (and SCAN's TYPE) can match.
type keyQuery struct {
	glob     *Glob
	possible [kindCount]bool
}

func newKeyQuery(pattern, typ string) (*keyQuery, error) {
	if len(pattern) > maxPatternLen {
		return nil, resp.Errorf("pattern is longer than %d bytes", maxPatternLen)
	}
	q := &keyQuery{glob: CompileGlob(pattern)}
	if !utf8.ValidString(pattern) || strings.ContainsRune(pattern, 0) {
		return q, nil // no stored key has such bytes: it matches nothing
	}
	for kind, f := range keyFamilies {
		q.possible[kind] = (typ == "" || resp.Is([]byte(typ), f.typ)) && q.glob.canMatchShape(f.head, f.tail, f.nameBytes())
	}
	return q, nil
}

func (q *keyQuery) wants(r keyRegion) bool {
	return slices.ContainsFunc(regionKinds[r], func(k keyKind) bool { return q.possible[k] })
}

// namePrefix is a prefix of every name of the region's keys the query can
// match, for SQL to start from: what the pattern's literal prefix says of
// the names after the head ("job:01J*" gives "01J"; names hold no ':', so
// it stops there), or, when the region's keys can only be head + name and
// the pattern's literal suffix holds a ':', the name itself: that ':' can
// only be the head's, so "*:alive" matches no job but job:alive.
func (q *keyQuery) namePrefix(r keyRegion) string {
	head := keyFamilies[regionKinds[r][0]].head
	untailed := true
	for _, kind := range regionKinds[r] {
		untailed = untailed && (!q.possible[kind] || keyFamilies[kind].tail == "")
	}
	if i := strings.LastIndexByte(q.glob.suffix, ':'); untailed && i >= 0 {
		return q.glob.suffix[i+1:]
	}
	rest, ok := strings.CutPrefix(q.glob.prefix, head)
	if !ok {
		return ""
	}
	rest, _, _ = strings.Cut(rest, ":")
	return rest
}

// add appends the key of the given kind and name when the query takes it.
func (q *keyQuery) add(keys []string, kind keyKind, name string) []string {
	if !q.possible[kind] {
		return keys
	}
	f := keyFamilies[kind]
	if key := f.head + name + f.tail; q.glob.Match(key) {
		keys = append(keys, key)
	}
	return keys
}
