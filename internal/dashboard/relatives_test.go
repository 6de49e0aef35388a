package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// A job's page lists its parents and its children, each with its status
// and a link to its own page.
func TestTheJobPageListsItsParentsAndChildren(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	graph := `[{"job_id":"rel-a","queue":"graph"},{"job_id":"rel-b","queue":"graph"},
		{"job_id":"rel-mid","queue":"graph","after":["rel-a","rel-b"]},
		{"job_id":"rel-end","queue":"graph","after":["rel-mid"]}]`
	if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.CANCEL", "rel-b").Err(); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
	res, page := b.do("GET", "job?id=rel-mid", nil)
	wantStatus(t, "the job page", res, http.StatusOK)
	section := func(id string) string {
		i := strings.Index(page, `id="`+id+`"`)
		if i < 0 {
			t.Fatalf("no %s on the job page:\n%s", id, page)
		}
		return page[i : i+strings.Index(page[i:], "</table>")]
	}
	rows := func(table string) []string { return strings.Split(table, "<tr>")[2:] }
	parents, children := rows(section("job-parents")), rows(section("job-children"))
	for _, c := range []struct {
		rows       []string
		i          int
		id, status string
	}{
		{parents, 0, "rel-a", "st-queued"},
		{parents, 1, "rel-b", "st-cancelled"},
		{children, 0, "rel-end", "st-cancelled"},
	} {
		if c.i >= len(c.rows) {
			t.Fatalf("no row %d for %s:\n%s", c.i, c.id, page)
		}
		row := c.rows[c.i]
		if !strings.Contains(row, `href="/job?id=`+c.id+`"`) || !strings.Contains(row, c.status) {
			t.Errorf("the row of %s lacks its link or %s:\n%s", c.id, c.status, row)
		}
	}
	if len(parents) != 2 || len(children) != 1 {
		t.Errorf("%d parents and %d children listed, want 2 and 1", len(parents), len(children))
	}

	_, page = b.do("GET", "job?id=rel-a", nil)
	if !strings.Contains(page, `id="job-children"`) || !strings.Contains(page, `href="/job?id=rel-mid"`) {
		t.Errorf("the parent's page does not link its child:\n%s", page)
	}
	if strings.Contains(page, `id="job-parents"`) {
		t.Error("a job without an after lists parents")
	}
}

// A job's page draws its graph: every ancestor and descendant a node
// linked to its page with its status, the job itself marked, an edge per
// after entry. A pending job says what it waits for, and its parents'
// results are listed.
func TestTheJobPageDrawsItsGraph(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	graph := `[{"job_id":"g-root","queue":"graph","type":"t"},{"job_id":"g-left","queue":"graph","after":["g-root"]},
		{"job_id":"g-right","queue":"graph","after":["g-root"]},
		{"job_id":"g-join","queue":"graph","after":["g-left","g-right"],"on_parent_failure":"run"},
		{"job_id":"g-tail","queue":"graph","after":["g-join"]},{"job_id":"g-other","queue":"graph"}]`
	if err := admin.Do(ctx, "JOB.SUBMIT", graph).Err(); err != nil {
		t.Fatal(err)
	}
	key := a.CreateKey(t, "worker", "graph-w")
	w := a.Client(t, redis.Options{Username: "graph-w", Password: key})
	reg, _ := json.Marshal(map[string]any{"worker_id": "graph-w", "hostname": "h", "agw_version": "1",
		"capabilities": map[string]any{"tools": []string{}, "types": []string{"t"}}})
	if err := w.Do(ctx, "WORKER.REGISTER", string(reg)).Err(); err != nil {
		t.Fatal(err)
	}
	var popped struct {
		ID string `json:"job_id"`
	}
	raw, err := w.Do(ctx, "RPOP", "queue:graph").Text()
	if err == nil {
		err = json.Unmarshal([]byte(raw), &popped)
	}
	if err != nil || popped.ID != "g-root" {
		t.Fatalf("RPOP: %q %v, want g-root", raw, err)
	}
	if err := w.Do(ctx, "JOB.UPDATE", "g-root", `{"status":"completed","result":{"answer":42}}`).Err(); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
	_, page := b.do("GET", "job?id=g-left", nil)
	i := strings.Index(page, `id="job-graph"`)
	if i < 0 {
		t.Fatalf("no graph on the page of a job with relatives:\n%s", page)
	}
	svg := page[i : i+strings.Index(page[i:], "</svg>")]
	for id, status := range map[string]string{"g-root": "completed", "g-left": "queued", "g-join": "pending", "g-tail": "pending"} {
		if !strings.Contains(svg, `href="/job?id=`+id+`"`) || !strings.Contains(svg, "<title>"+id+": "+status+"</title>") {
			t.Errorf("the graph lacks %s (%s) or its link:\n%s", id, status, svg)
		}
	}
	// g-right is a sibling, neither ancestor nor descendant; g-other is
	// not related at all.
	for _, id := range []string{"g-right", "g-other"} {
		if strings.Contains(svg, "id="+id+`"`) {
			t.Errorf("the graph of g-left draws %s", id)
		}
	}
	if n := strings.Count(svg, `class="edge"`); n != 3 {
		t.Errorf("%d edges drawn, want 3 (root → left → join → tail)", n)
	}
	if strings.Count(svg, " self\"") != 1 {
		t.Errorf("the job is not marked once in its graph:\n%s", svg)
	}

	i = strings.Index(page, `id="job-parents"`)
	if i < 0 || !strings.Contains(page[i:i+strings.Index(page[i:], "</table>")], "answer") {
		t.Errorf("the parent's result is not listed:\n%s", page)
	}
	_, page = b.do("GET", "job?id=g-join", nil)
	for _, want := range []string{"once its parents have ended", `id="job-pending-parents">2, 2 not ended`, `id="job-on-parent-failure">run`} {
		if !strings.Contains(page, want) {
			t.Errorf("the pending job's page lacks %q", want)
		}
	}
	_, page = b.do("GET", "job?id=g-other", nil)
	if strings.Contains(page, `id="job-graph"`) {
		t.Error("a job without relatives has a graph")
	}
}

// A job's children and parents are listed a page at a time, each page
// linking the next, until every one was listed once.
func TestTheJobPagePagesItsParentsAndChildren(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	const n = 230
	var jobs []string
	var ids []string
	for i := range n {
		id := fmt.Sprintf("pg-%03d", i)
		ids = append(ids, `"`+id+`"`)
		jobs = append(jobs, `{"job_id":"`+id+`","queue":"paged"}`)
	}
	jobs = append(jobs, `{"job_id":"pg-fan","queue":"paged","after":[`+strings.Join(ids, ",")+`]}`)
	for i := range n {
		jobs = append(jobs, fmt.Sprintf(`{"job_id":"pg-kid-%03d","queue":"paged","after":["pg-fan"]}`, i))
	}
	if err := admin.Do(ctx, "JOB.SUBMIT", "["+strings.Join(jobs, ",")+"]").Err(); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
	for _, side := range []struct{ table, next, prefix string }{
		{"job-parents", "Next parents", `"/job?id=pg-`},
		{"job-children", "Next children", `"/job?id=pg-kid-`},
	} {
		seen := map[string]bool{}
		path, pages := "job?id=pg-fan", 0
		for path != "" && pages < 10 {
			pages++
			res, page := b.do("GET", path, nil)
			wantStatus(t, path, res, http.StatusOK)
			i := strings.Index(page, `id="`+side.table+`"`)
			if i < 0 {
				t.Fatalf("%s: no %s", path, side.table)
			}
			table := page[i : i+strings.Index(page[i:], "</table>")]
			for _, row := range strings.Split(table, "<tr>")[2:] {
				j := strings.Index(row, side.prefix)
				if j < 0 {
					t.Fatalf("%s: a row of %s links no relative: %s", path, side.table, row)
				}
				id := row[j+len(`"/job?id=`) : j+strings.Index(row[j+1:], `"`)+1]
				if seen[id] {
					t.Fatalf("%s listed twice", id)
				}
				seen[id] = true
			}
			path = ""
			if k := strings.Index(page, `">`+side.next+`</a>`); k >= 0 {
				href := page[strings.LastIndex(page[:k], `href="/`)+len(`href="/`) : k]
				path = strings.ReplaceAll(href, "&amp;", "&")
			}
		}
		if len(seen) != n || pages < 3 {
			t.Errorf("%s: %d listed over %d pages, want %d over 3", side.table, len(seen), pages, n)
		}
	}
}
