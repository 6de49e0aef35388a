package commands

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A batch read with one decoder gives the jobs that reading its documents
// one by one gives; any batch that reading refuses, it refuses too (the
// caller then reads it document by document to word the error).
func TestParseBatchAgreesWithParsingEachDocument(t *testing.T) {
	s := &Server{opts: Options{MaxPayload: 200, MaxAttempts: 3, JobTimeout: time.Hour}}
	valid := []string{
		`{"job_id":"a","queue":"q","type":"t","payload":{"n":1}}`,
		` {"job_id":"b","priority":5,"max_attempts":7,"retry_backoff_seconds":2.5,"timeout_seconds":60}`,
		"{\"job_id\":\"c\",\"plan\":{\"tasks\":[{\"tool\":\"sort\"},{\"tool\":\"sort\"},{\"tool\":\"grep\"}]},\n\"inputs\":[1]}",
		`{"job_id":"d","requires":["x","y","x"],"run_at":"2030-01-02T03:04:05Z","unique_key":"k"}`,
		`{"job_id":"e","type":"only-a-type","payload":"caf\u00e9"}`,
	}
	body := []byte("[" + strings.Join(valid, " ,\n") + "]")
	got, ok := s.parseBatch(body)
	if !ok {
		t.Fatalf("a valid batch was refused: %s", body)
	}
	var docs []json.RawMessage
	if err := json.Unmarshal(body, &docs); err != nil {
		t.Fatal(err)
	}
	raw := make([][]byte, len(docs))
	for i, d := range docs {
		raw[i] = d
	}
	want, err := s.parseJobs(raw, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("one decoder:\n%+v\ndocument by document:\n%+v", got, want)
	}

	for _, bad := range []string{
		`[]`,
		`[{"job_id":"a"},]`,
		`[{"job_id":"a"}] trailing`,
		`[{"job_id":"a"}][]`,
		`[null]`,
		`[5]`,
		`[{"job_id":"a","unknown":1}]`,
		`[{"job_id":"a","priority":"high"}]`,
		`[{"job_id":"bad id"}]`,
		`[{"job_id":"a","payload":"` + strings.Repeat("x", 300) + `"}]`,
		`[{"job_id":"a","payload":"\u0000"}]`,
		"[{\"job_id\":\"a\",\"payload\":\"\xff\"}]",
		`[{"job_id":"a"}`,
	} {
		if jobs, ok := s.parseBatch([]byte(bad)); ok {
			t.Errorf("parseBatch accepted %q: %+v", bad, jobs)
		}
	}
}
