package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

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
