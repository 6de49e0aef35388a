package commands

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agq/agq/records"
)

// A batch read with one decoder gives the documents that reading them one
// by one gives; any batch that reading refuses, it refuses too (the caller
// then reads it document by document to word the error). What the
// documents ask is the engine's to check.
func TestDecodeBatchAgreesWithDecodingEachDocument(t *testing.T) {
	s := &Server{opts: Options{MaxPayload: 200}}
	valid := []string{
		`{"job_id":"a","queue":"q","type":"t","payload":{"n":1}}`,
		` {"job_id":"b","priority":5,"max_attempts":7,"retry_backoff_seconds":2.5,"timeout_seconds":60}`,
		"{\"job_id\":\"c\",\"plan\":{\"tasks\":[{\"tool\":\"sort\"},{\"tool\":\"sort\"},{\"tool\":\"grep\"}]},\n\"inputs\":[1]}",
		`{"job_id":"d","requires":["x","y","x"],"run_at":"2030-01-02T03:04:05Z","unique_key":"k"}`,
		`{"job_id":"e","type":"only-a-type","payload":"caf\u00e9"}`,
		`{"job_id":"bad id","max_attempts":0}`,
	}
	body := []byte("[" + strings.Join(valid, " ,\n") + "]")
	got, ok := s.decodeBatch(body)
	if !ok {
		t.Fatalf("a valid batch was refused: %s", body)
	}
	var want []records.JobSpec
	for _, doc := range valid {
		var spec records.JobSpec
		dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			t.Fatal(err)
		}
		want = append(want, spec)
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
		`[{"job_id":"a","payload":"` + strings.Repeat("x", 300) + `"}]`,
		`[{"job_id":"a","payload":"\u0000"}]`,
		"[{\"job_id\":\"a\",\"payload\":\"\xff\"}]",
		`[{"job_id":"a"}`,
	} {
		if specs, ok := s.decodeBatch([]byte(bad)); ok {
			t.Errorf("decodeBatch accepted %q: %+v", bad, specs)
		}
	}
}
