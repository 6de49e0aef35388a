package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// A queue's page lists its fair keys, the largest backlog first, with
// what each runs; a queue whose jobs name no key shows no such table.
func TestTheQueuePageListsItsFairKeys(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	jobs := `[{"queue":"tenants","fair_key":"acme"},{"queue":"tenants","fair_key":"acme"},
		{"queue":"tenants","fair_key":"acme"},{"queue":"tenants","fair_key":"globex"},
		{"queue":"plain"}]`
	if err := admin.Do(ctx, "JOB.SUBMIT", jobs).Err(); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, "http://"+a.HTTPAddr+"/")
	wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
	res, page := b.do("GET", "queue?name=tenants", nil)
	wantStatus(t, "the queue page", res, http.StatusOK)
	i := strings.Index(page, `id="fair-keys"`)
	if i < 0 {
		t.Fatalf("no fair keys on the queue page:\n%s", page)
	}
	rows := strings.Split(page[i:i+strings.Index(page[i:], "</table>")], "<tr>")[2:]
	if len(rows) != 2 || !strings.Contains(rows[0], "acme") || !strings.Contains(rows[0], ">3<") ||
		!strings.Contains(rows[1], "globex") || !strings.Contains(rows[1], ">1<") {
		t.Fatalf("fair keys listed:\n%s", strings.Join(rows, "\n"))
	}
	res, page = b.do("GET", "queue?name=plain", nil)
	wantStatus(t, "a plain queue's page", res, http.StatusOK)
	if strings.Contains(page, `id="fair-keys"`) {
		t.Fatal("a queue without keys lists fair keys")
	}
}
