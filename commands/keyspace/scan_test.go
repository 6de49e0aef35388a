package keyspace

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// jobTable is an engine holding jobs and nothing else; it records the
// listings asked of it.
type jobTable struct {
	api.Reads
	ids   []string
	asked []records.KeyspaceJobsParams
}

func (*jobTable) HeartbeatInterval() time.Duration { return 30 * time.Second }

func (*jobTable) KeyspaceWorkers(context.Context, string) ([]records.KeyspaceWorker, error) {
	return nil, nil
}

func (*jobTable) KeyspaceQueues(context.Context, string) ([]string, error) { return nil, nil }

func (t *jobTable) KeyspaceJobs(_ context.Context, p records.KeyspaceJobsParams) ([]records.KeyspaceJob, error) {
	t.asked = append(t.asked, p)
	var jobs []records.KeyspaceJob
	skip := p.Offset
	for _, id := range t.ids {
		switch {
		case !strings.HasPrefix(id, p.IDPrefix), p.After != "" && id <= p.After:
		case p.After == "" && skip > 0:
			skip--
		case len(jobs) < p.Limit:
			jobs = append(jobs, records.KeyspaceJob{ID: id})
		}
	}
	return jobs, nil
}

func TestScanResumesJobsFromTheRememberedID(t *testing.T) {
	t.Parallel()
	eng := &jobTable{ids: []string{"a1", "a2", "a3", "a4", "a5"}}
	ks := New(eng, nil)
	var keys []string
	cursor := uint64(0)
	for range 10 {
		reply, err := ks.Scan(t.Context(), ScanArgs{Cursor: cursor, Match: "job:*", Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		page := reply.(resp.Array)
		if cursor, err = strconv.ParseUint(string(page[0].(resp.BulkString)), 10, 64); err != nil {
			t.Fatal(err)
		}
		for _, k := range page[1].(resp.Array) {
			keys = append(keys, string(k.(resp.BulkString)))
		}
		if cursor == 0 {
			break
		}
	}
	if want := []string{"job:a1", "job:a2", "job:a3", "job:a4", "job:a5"}; !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	for i, p := range eng.asked[1:] {
		if p.After == "" {
			t.Errorf("page %d was read by offset %d, not after the remembered id", i+2, p.Offset)
		}
	}
}
