package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestCompletedBodyIsTheGeneralReport checks the completed report written
// directly against the one built as a document and encoded.
func TestCompletedBodyIsTheGeneralReport(t *testing.T) {
	for _, delivery := range []string{"5f0c4d9e-7f0e-4c1e-9d1c-2b7f0e4c1e9d", "", "quo\"te", "<&>", "caf\u00e9", "\u2028"} {
		for _, result := range []any{nil, "ok", 42, map[string]any{"a": []int{1, 2}, "h": "<b>"}, []string{"x"}, ReportFields{"output": 1, "extra": true}, func() {}} {
			r := &runningJob{job: &Job{msg: &jobMessage{JobID: "j", Delivery: delivery, Attempt: 3}}}
			doc, _ := finalReport(result, nil, nil)
			want := decoded(t, r.body(doc))
			got, ok := r.completedBody(result)
			if !ok {
				continue // the general path writes it
			}
			if g := decoded(t, got); !reflect.DeepEqual(g, want) {
				t.Errorf("delivery %q, result %v:\n got  %s\n want %s", delivery, result, got, r.body(doc))
			}
		}
	}
}

func decoded(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}
