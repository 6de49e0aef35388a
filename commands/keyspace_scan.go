package commands

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// KEYS and SCAN walk the keyspace region by region, each region listed from
// one table in name order; a region none of whose families the pattern (or
// SCAN's TYPE) can match is not read at all, and the pattern's literal
// prefix becomes a name prefix in SQL. A SCAN cursor is the region times
// regionStride plus the number of rows of that region already walked: an
// offset cursor. For jobs, the large region, the node also remembers the
// last id before each cursor it handed out and reads the next page from
// that id on, through the primary key, instead of skipping the offset.
// A cursor the node does not know (given out by another node, or forgotten)
// is read by offset, and if jobs were deleted meanwhile that page may skip
// as many: SCAN's guarantees are Redis's, short of that case.

type keyRegion int

const (
	regionCapabilities keyRegion = iota // from workers
	regionWorkers
	regionQueues
	regionJobs
	regionCount
)

// regionStride separates the regions in a cursor; it keeps cursors readable
// (3000000000000020 is row 20 of jobs).
const regionStride = 1_000_000_000_000_000

// keysReplyLimit caps what one KEYS may answer; SCAN has no such limit.
const keysReplyLimit = 100_000

// keysBatch is how many rows KEYS reads per statement.
const keysBatch = 10_000

// maxPatternLen bounds a pattern, which is compiled before use; no key is
// a tenth as long.
const maxPatternLen = 4096

var regionKinds = [regionCount][]keyKind{
	regionCapabilities: {kindCapability},
	regionWorkers:      {kindWorkerAlive, kindWorkerMetadata, kindWorkerStats},
	regionQueues:       {kindQueue},
	regionJobs:         {kindJob, kindJobWorker},
}

// keyQuery is a KEYS or SCAN request: the pattern, and which families it
// (and SCAN's TYPE) can match.
type keyQuery struct {
	glob     *glob
	possible [kindCount]bool
}

func newKeyQuery(pattern, typ string) (*keyQuery, error) {
	if len(pattern) > maxPatternLen {
		return nil, resp.Errorf("pattern is longer than %d bytes", maxPatternLen)
	}
	q := &keyQuery{glob: compileGlob(pattern)}
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
	if key := f.head + name + f.tail; q.glob.match(key) {
		keys = append(keys, key)
	}
	return keys
}

// regionPage is one page of a region: the matching keys of the rows read.
type regionPage struct {
	keys []string
	rows int
	// last is the name of the last row read, to resume after it.
	last string
	// done says the region has no rows after these.
	done bool
}

// page reads up to limit rows of a region from row pos on (after the
// name after, when it is known) and returns the matching keys they hold.
func (ks *keyspace) page(ctx context.Context, q *keyQuery, r keyRegion, pos int64, after string, limit int) (regionPage, error) {
	if r == regionJobs {
		return ks.jobsPage(ctx, q, pos, after, limit)
	}
	names, err := ks.smallRegion(ctx, q, r)
	if err != nil {
		return regionPage{}, err
	}
	var p regionPage
	start := min(pos, int64(len(names)))
	end := min(start+int64(limit), int64(len(names)))
	for _, row := range names[start:end] {
		for _, kind := range row.kinds {
			p.keys = q.add(p.keys, kind, row.name)
		}
	}
	p.rows, p.done = int(end-start), end == int64(len(names))
	return p, nil
}

// regionRow is one row of a region and the kinds of key it has now.
type regionRow struct {
	name  string
	kinds []keyKind
}

// smallRegion lists every row of the capabilities, workers or queues region
// in name order; these tables hold one row per worker or queue.
func (ks *keyspace) smallRegion(ctx context.Context, q *keyQuery, r keyRegion) ([]regionRow, error) {
	st := ks.s.eng
	switch r {
	case regionQueues:
		names, err := st.KeyspaceQueues(ctx, q.namePrefix(regionQueues))
		rows := make([]regionRow, len(names))
		for i, n := range names {
			rows[i] = regionRow{name: n, kinds: []keyKind{kindQueue}}
		}
		return rows, err
	case regionWorkers:
		workers, err := st.KeyspaceWorkers(ctx, q.namePrefix(regionWorkers))
		rows := make([]regionRow, len(workers))
		for i, w := range workers {
			rows[i].name = w.ID
			for _, kind := range regionKinds[regionWorkers] {
				if _, ok := ks.workerKeyTTL(w, kind); ok {
					rows[i].kinds = append(rows[i].kinds, kind)
				}
			}
		}
		return rows, err
	default: // regionCapabilities
		workers, err := st.KeyspaceWorkers(ctx, "")
		seen := map[string]bool{}
		var rows []regionRow
		for _, w := range workers {
			for _, c := range w.Capabilities {
				if w.State == records.WorkerActive && !seen[c] {
					seen[c] = true
					rows = append(rows, regionRow{name: c, kinds: []keyKind{kindCapability}})
				}
			}
		}
		slices.SortFunc(rows, func(a, b regionRow) int { return strings.Compare(a.name, b.name) })
		return rows, err
	}
}

// jobsPage reads a page of job ids: only running jobs when the query can
// match nothing but job:<id>:worker keys.
func (ks *keyspace) jobsPage(ctx context.Context, q *keyQuery, pos int64, after string, limit int) (regionPage, error) {
	jobs, err := ks.s.eng.KeyspaceJobs(ctx, records.KeyspaceJobsParams{
		IDPrefix: q.namePrefix(regionJobs), RunningOnly: !q.possible[kindJob],
		After: after, Offset: pos, Limit: limit + 1,
	})
	if err != nil {
		return regionPage{}, err
	}
	p := regionPage{done: len(jobs) <= limit}
	jobs = jobs[:min(len(jobs), limit)]
	for _, j := range jobs {
		p.keys = q.add(p.keys, kindJob, j.ID)
		if j.Holder != "" {
			p.keys = q.add(p.keys, kindJobWorker, j.ID)
		}
	}
	p.rows = len(jobs)
	if len(jobs) > 0 {
		p.last = jobs[len(jobs)-1].ID
	}
	return p, nil
}

// KEYS pattern — every matching key, sorted; more than keysReplyLimit is
// an error that points to SCAN.
func (ks *keyspace) cmdKeys(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	q, err := newKeyQuery(string(args[1]), "")
	if err != nil {
		return nil, err
	}
	var keys []string
	for r := range regionCount {
		if !q.wants(r) {
			continue
		}
		pos, after := int64(0), ""
		for {
			p, err := ks.page(ctx, q, r, pos, after, keysBatch)
			if err != nil {
				return nil, err
			}
			keys = append(keys, p.keys...)
			if len(keys) > keysReplyLimit {
				return nil, resp.Errorf("KEYS would answer more than %d keys; use SCAN", keysReplyLimit)
			}
			if p.done {
				break
			}
			pos, after = pos+int64(p.rows), p.last
		}
	}
	slices.Sort(keys)
	return resp.StringArray(keys), nil
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] — COUNT rows are
// read per call (10 by default), across regions.
func (ks *keyspace) cmdScan(ctx context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	cursor, err := strconv.ParseUint(string(args[1]), 10, 64)
	if err != nil {
		return nil, resp.Errorf("invalid cursor")
	}
	pattern, typ, count := "*", "", int64(10)
	for i := 2; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		switch v := string(args[i+1]); resp.Lower(args[i]) {
		case "match":
			pattern = v
		case "type":
			typ = v
		case "count":
			if count, err = resp.ParseInt(args[i+1]); err != nil {
				return nil, resp.ErrNotInteger
			}
			if count < 1 {
				return nil, resp.ErrSyntax
			}
		default:
			return nil, resp.ErrSyntax
		}
	}
	q, err := newKeyQuery(pattern, typ)
	if err != nil {
		return nil, err
	}
	r, pos := keyRegion(min(cursor/regionStride, uint64(regionCount))), int64(cursor%regionStride)
	budget := int(min(count, keysBatch))
	keys := []string{}
	for r < regionCount && budget > 0 {
		if !q.wants(r) {
			r, pos = r+1, 0
			continue
		}
		resume := resumeKey{pos: pos, prefix: q.namePrefix(regionJobs), runningOnly: !q.possible[kindJob]}
		after := ""
		if r == regionJobs && pos > 0 {
			after = ks.resume.get(resume)
		}
		p, err := ks.page(ctx, q, r, pos, after, budget)
		if err != nil {
			return nil, err
		}
		keys = append(keys, p.keys...)
		budget -= p.rows
		if p.done {
			r, pos = r+1, 0
			continue
		}
		pos += int64(p.rows)
		if r == regionJobs {
			resume.pos = pos
			ks.resume.put(resume, p.last)
		}
	}
	for r < regionCount && !q.wants(r) {
		r, pos = r+1, 0
	}
	next := uint64(0)
	if r < regionCount {
		next = uint64(r)*regionStride + uint64(pos)
	}
	return resp.Array{resp.BulkString(strconv.FormatUint(next, 10)), resp.StringArray(keys)}, nil
}

// DBSIZE — how many keys there are. It counts the jobs table.
func (ks *keyspace) cmdDBSize(ctx context.Context, _ *Session, _ [][]byte) (resp.Reply, error) {
	all, _ := newKeyQuery("*", "")
	n := 0
	for r := range regionJobs {
		rows, err := ks.smallRegion(ctx, all, r)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			n += len(row.kinds)
		}
	}
	jobs, held, err := ks.s.eng.KeyspaceJobCounts(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Int(int64(n) + jobs + held), nil
}

// resumeMemo remembers the last job id read before each SCAN cursor this
// node handed out in the jobs region, so that the next page is read from
// that id on.
type resumeMemo struct {
	mu   sync.Mutex
	max  int
	last map[resumeKey]string
}

// resumeKey is a cursor position of a listing: the prefix and the running
// filter make the listing what it is.
type resumeKey struct {
	pos         int64
	prefix      string
	runningOnly bool
}

func newResumeMemo(size int) *resumeMemo {
	return &resumeMemo{max: size, last: map[resumeKey]string{}}
}

func (m *resumeMemo) get(k resumeKey) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[k]
}

func (m *resumeMemo) put(k resumeKey, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.last) >= m.max {
		for old := range m.last { // forget any one: a forgotten cursor still works
			delete(m.last, old)
			break
		}
	}
	m.last[k] = id
}
