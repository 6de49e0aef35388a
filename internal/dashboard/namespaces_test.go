package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// A namespace's viewer sees its namespace only; a cluster admin picks the
// namespace its pages show.
func TestTheDashboardShowsOneNamespace(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	alice := a.InNamespace(t, "team-a", "producer", "alice-p")
	if err := alice.Do(ctx, "JOB.SUBMIT", `{"job_id":"only-in-a","queue":"alphaq"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"only-in-default","queue":"deltaq"}`).Err(); err != nil {
		t.Fatal(err)
	}
	viewerKey, err := admin.Do(ctx, "KEY.CREATE", "viewer", "alice-v", "NAMESPACE", "team-a").Text()
	if err != nil {
		t.Fatal(err)
	}

	viewer := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "the namespace viewer's sign-in", viewer.signIn(viewerKey), http.StatusSeeOther)
	res, page := viewer.do("GET", "", nil)
	wantStatus(t, "its overview", res, http.StatusOK)
	if !strings.Contains(page, "alphaq") || strings.Contains(page, "deltaq") || !strings.Contains(page, "namespace team-a") {
		t.Fatalf("team-a's viewer's overview:\n%s", page)
	}
	if res, _ := viewer.do("GET", "job?id=only-in-default", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("team-a's viewer opened default's job: %d", res.StatusCode)
	}
	if res, _ := viewer.do("GET", "namespace?name=default", nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("team-a's viewer picked another namespace: %d", res.StatusCode)
	}

	root := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "the cluster admin's sign-in", root.signIn(a.AdminKey), http.StatusSeeOther)
	_, page = root.do("GET", "", nil)
	if !strings.Contains(page, "deltaq") || strings.Contains(page, "alphaq") || !strings.Contains(page, "<option>team-a</option>") {
		t.Fatalf("the cluster admin's first overview:\n%s", page)
	}
	wantStatus(t, "picking team-a", func() *http.Response { r, _ := root.do("GET", "namespace?name=team-a", nil); return r }(), http.StatusSeeOther)
	_, page = root.do("GET", "", nil)
	if !strings.Contains(page, "alphaq") || strings.Contains(page, "deltaq") {
		t.Fatalf("the cluster admin's overview of team-a:\n%s", page)
	}
	if res, _ := root.do("GET", "job?id=only-in-a", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("the job of team-a in team-a's view: %d", res.StatusCode)
	}
}
