package keyspace

import (
	"context"
	"slices"
	"strconv"
	"strings"

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

// regionStride separates the regions in a cursor; it keeps cursors readable
// (3000000000000020 is row 20 of jobs).
const regionStride = 1_000_000_000_000_000

// keysReplyLimit caps what one KEYS may answer; SCAN has no such limit.
const keysReplyLimit = 100_000

// keysBatch is how many rows KEYS reads per statement.
const keysBatch = 10_000

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
func (ks *Keyspace) page(ctx context.Context, q *keyQuery, r keyRegion, pos int64, after string, limit int) (regionPage, error) {
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
func (ks *Keyspace) smallRegion(ctx context.Context, q *keyQuery, r keyRegion) ([]regionRow, error) {
	st := ks.eng
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
func (ks *Keyspace) jobsPage(ctx context.Context, q *keyQuery, pos int64, after string, limit int) (regionPage, error) {
	jobs, err := ks.eng.KeyspaceJobs(ctx, records.KeyspaceJobsParams{
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
func (ks *Keyspace) Keys(ctx context.Context, pattern string) (resp.Reply, error) {
	q, err := newKeyQuery(pattern, "")
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

// ScanArgs are a SCAN's arguments, parsed.
type ScanArgs struct {
	// Cursor is 0 or a cursor a SCAN answered.
	Cursor uint64
	// Match is the pattern; "*" takes every key.
	Match string
	// Type keeps the keys of one type ("string", "list", "set"), in any
	// case; "" keeps all.
	Type string
	// Count is how many rows to read, at least 1.
	Count int64
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] — Count rows are
// read per call, across regions.
func (ks *Keyspace) Scan(ctx context.Context, a ScanArgs) (resp.Reply, error) {
	q, err := newKeyQuery(a.Match, a.Type)
	if err != nil {
		return nil, err
	}
	r, pos := keyRegion(min(a.Cursor/regionStride, uint64(regionCount))), int64(a.Cursor%regionStride)
	budget := int(min(a.Count, keysBatch))
	keys := []string{}
	for r < regionCount && budget > 0 {
		if !q.wants(r) {
			r, pos = r+1, 0
			continue
		}
		p, err := ks.scanPage(ctx, q, r, pos, budget)
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

// scanPage reads a SCAN's page of a region; in the jobs region it reads
// from the id remembered for the cursor and remembers the next one.
func (ks *Keyspace) scanPage(ctx context.Context, q *keyQuery, r keyRegion, pos int64, limit int) (regionPage, error) {
	resume := resumeKey{namespace: ks.eng.Namespace(), pos: pos, prefix: q.namePrefix(regionJobs), runningOnly: !q.possible[kindJob]}
	after := ""
	if r == regionJobs && pos > 0 {
		after = ks.resume.get(resume)
	}
	p, err := ks.page(ctx, q, r, pos, after, limit)
	if err != nil || p.done || r != regionJobs {
		return p, err
	}
	resume.pos = pos + int64(p.rows)
	ks.resume.put(resume, p.last)
	return p, nil
}

// DBSIZE — how many keys there are. It counts the jobs table.
func (ks *Keyspace) DBSize(ctx context.Context) (resp.Reply, error) {
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
	jobs, held, err := ks.eng.KeyspaceJobCounts(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Int(int64(n) + jobs + held), nil
}
