package client

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// decodeSeeds are deliveries as agq writes them and the odd shapes a
// decoder must still read as encoding/json does.
var decodeSeeds = []string{
	`{"attempt":1,"inputs":null,"job_id":"01J9","max_attempts":3,"payload":{"sent_at":0},"plan":null,"priority":0,"queue":"ready","requires":[],"timeout_seconds":3600,"type":"bench","delivery":"5f0c4d9e-7f0e-4c1e-9d1c-2b7f0e4c1e9d"}`,
	`{"job_id":"a","type":"t","payload":{"s":"}]\"{["},"requires":["git","gpu"],"parents":{"p1":{"status":"completed","result":[1,2]}},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`,
	` { "job_id" : "a" , "attempt" : 2 , "timeout_seconds" : 1.5e1 } `,
	`{"job_id":"caf\u00e9","type":"line\nbreak","queue":"tab\t"}`,
	`{"job_id":"a","JOB_ID":"b","Type":"x"}`,
	`{"job_id":"a","priority":-0,"attempt":null,"max_attempts":1.0}`,
	`{"job_id":"a","priority":99999999999999999999}`,
	`{"job_id":5}`,
	`{"job_id":"a","timeout_seconds":"5"}`,
	`{"job_id":"a","requires":"gpu"}`,
	`{"job_id":"a","requires":null,"plan":[{"tool":"sh","args":["-c","echo }"]}],"inputs":"x"}`,
	`{"job_id":"\xff\xfe","type":"ok"}`,
	`{"job_id":"a","extra":{"nested":[true,false,null]},"more":-1.25e-3}`,
	`{"job_id":"a","job_id":"b"}`,
	`{}`,
	`[]`,
	`null`,
	`{"job_id":"a",}`,
	`{"job_id":"a"} x`,
	`{"job_id":"a"`,
}

// decodeStd is what encoding/json reads.
func decodeStd(raw string) (jobMessage, error) {
	m := jobMessage{raw: raw}
	err := json.Unmarshal([]byte(raw), &m)
	return m, err
}

// sameAsStd checks decodeJob against encoding/json on a valid document:
// the same fields, and an error exactly when encoding/json has one.
func sameAsStd(t *testing.T, raw string) {
	t.Helper()
	if !json.Valid([]byte(raw)) {
		return
	}
	want, wantErr := decodeStd(raw)
	var got jobMessage
	gotErr := decodeJob(raw, &got)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%s: error %v, encoding/json %v", raw, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(normalized(got), normalized(want)) {
		t.Fatalf("%s:\n got  %+v\n want %+v", raw, got, want)
	}
}

// normalized compares JSON values by their bytes (nil and empty alike).
func normalized(m jobMessage) jobMessage {
	for _, r := range []*json.RawMessage{&m.Plan, &m.Inputs, &m.Payload, &m.Parents} {
		if len(*r) == 0 {
			*r = nil
		}
	}
	return m
}

func TestDecodeJobReadsWhatEncodingJSONReads(t *testing.T) {
	for _, raw := range decodeSeeds {
		sameAsStd(t, raw)
	}
	// Deliveries of many shapes, as agq marshals them.
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "a", "queue-1", "caf\u00e9", "quote\"d", "back\\slash", "<&>", "\u2028", "tab\there"}
	raws := []json.RawMessage{nil, json.RawMessage(`null`), json.RawMessage(`{"a":[1,{"b":"]"}]}`), json.RawMessage(`"s"`), json.RawMessage(`[]`), json.RawMessage(`12.5`)}
	for range 2000 {
		d := struct {
			Attempt        int             `json:"attempt"`
			Inputs         json.RawMessage `json:"inputs"`
			JobID          string          `json:"job_id"`
			MaxAttempts    int             `json:"max_attempts"`
			Payload        json.RawMessage `json:"payload"`
			Plan           json.RawMessage `json:"plan"`
			Priority       int             `json:"priority"`
			Queue          string          `json:"queue"`
			Requires       []string        `json:"requires"`
			TimeoutSeconds float64         `json:"timeout_seconds"`
			Type           string          `json:"type"`
			Parents        json.RawMessage `json:"parents,omitempty"`
			Delivery       string          `json:"delivery,omitempty"`
			TraceParent    string          `json:"traceparent,omitempty"`
		}{
			Attempt: rng.IntN(5), Inputs: raws[rng.IntN(len(raws))], JobID: strs[rng.IntN(len(strs))] + fmt.Sprint(rng.IntN(1000)),
			MaxAttempts: rng.IntN(30), Payload: raws[rng.IntN(len(raws))], Plan: raws[rng.IntN(len(raws))],
			Priority: rng.IntN(200) - 100, Queue: strs[rng.IntN(len(strs))], TimeoutSeconds: float64(rng.IntN(100000)) / 8,
			Type: strs[rng.IntN(len(strs))], Parents: raws[rng.IntN(len(raws))], Delivery: strs[rng.IntN(len(strs))],
			TraceParent: strs[rng.IntN(len(strs))],
		}
		if rng.IntN(2) == 0 {
			d.Requires = []string{strs[rng.IntN(len(strs))], strs[rng.IntN(len(strs))]}
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		sameAsStd(t, string(b))
	}
}

func TestDecodeJobRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, raw := range []string{`{"job_id":"a",}`, `{"job_id":"a"} x`, `{"job_id":"a"`, `{"job_id":5}`, `nope`} {
		var m jobMessage
		if err := decodeJob(raw, &m); err == nil {
			t.Errorf("%s: decoded without an error", raw)
		}
	}
}

func FuzzDecodeJob(f *testing.F) {
	for _, raw := range decodeSeeds {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { sameAsStd(t, raw) })
}

func BenchmarkDecodeJob(b *testing.B) {
	raw := decodeSeeds[0]
	b.Run("flat", func(b *testing.B) {
		for b.Loop() {
			var m jobMessage
			if err := decodeJob(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeStd(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
