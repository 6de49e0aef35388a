package commands

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

var updateDocSeeds = []string{
	`{"status":"completed","output":null,"delivery":"5f0c4d9e-7f0e-4c1e-9d1c-2b7f0e4c1e9d","attempt":1}`,
	`{"status":"failed","error":"exit status 1\nstderr: \"boom\"","retryable":false,"attempt":3,"delivery":"x"}`,
	`{"status":"snoozed","seconds":1.5e1,"output":{"a":[1,"}]",{"b":null}]}}`,
	` { "status" : "running" , "worker_id" : "w" , "started_at" : "2026-11-26T19:00:00Z" } `,
	`{"Status":"completed"}`,
	`{"ſtatus":"completed"}`,
	`{"st\u0061tus":"completed"}`,
	`{"status":"caf\u00e9","error":"\xff"}`,
	`{"status":"completed","status":null,"retryable":true,"retryable":null}`,
	`{"attempt":"1"}`,
	`{"attempt":1.0}`,
	`{"attempt":-0,"seconds":-0}`,
	`{"attempt":99999999999999999999}`,
	`{"seconds":1e400}`,
	`{"retryable":1}`,
	`{"status":5}`,
	`{"status":["completed"]}`,
	`{}`,
	`[]`,
	`null`,
	`"completed"`,
	`{"status":"completed",}`,
	`{"status":"completed"} x`,
}

// sameUpdateDoc checks readUpdateDoc against encoding/json: when it reads a
// document, it reads what encoding/json reads.
func sameUpdateDoc(t *testing.T, raw string) {
	t.Helper()
	var got updateDoc
	if !readUpdateDoc([]byte(raw), &got) {
		return
	}
	var want updateDoc
	if err := decodeUpdateDoc([]byte(raw), &want); err != nil {
		t.Fatalf("%s: read, but encoding/json says %v", raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", raw, got, want)
	}
}

func TestReadUpdateDocReadsWhatEncodingJSONReads(t *testing.T) {
	for _, raw := range updateDocSeeds {
		sameUpdateDoc(t, raw)
	}
	var read int
	rng := rand.New(rand.NewPCG(3, 4))
	strs := []string{"completed", "failed", "", "caf\u00e9", "quote\"d", "back\\slash", "<&>", "line\nbreak"}
	outputs := []string{`null`, `{"a":[1,{"b":"]"}]}`, `"s"`, `[]`, `12.5`, `true`}
	for range 2000 {
		doc := fmt.Sprintf(`{"status":%q,"output":%s,"attempt":%d`, strs[rng.IntN(len(strs))], outputs[rng.IntN(len(outputs))], rng.IntN(9)-2)
		if rng.IntN(2) == 0 {
			e, _ := json.Marshal(strs[rng.IntN(len(strs))])
			doc += `,"error":` + string(e) + fmt.Sprintf(`,"retryable":%v`, rng.IntN(2) == 0)
		}
		if rng.IntN(3) == 0 {
			doc += fmt.Sprintf(`,"seconds":%v`, float64(rng.IntN(10000))/7)
		}
		doc += fmt.Sprintf(`,"delivery":%q}`, strs[rng.IntN(len(strs))])
		var d updateDoc
		if readUpdateDoc([]byte(doc), &d) {
			read++
		}
		sameUpdateDoc(t, doc)
	}
	if read < 1000 {
		t.Fatalf("only %d of 2000 reports read in one pass", read)
	}
}

func FuzzReadUpdateDoc(f *testing.F) {
	for _, raw := range updateDocSeeds {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { sameUpdateDoc(t, raw) })
}
