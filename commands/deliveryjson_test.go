package commands

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/agq/agq/records"
)

// TestDeliveryJSONIsWhatJSONMarshalWrites compares the hand-written
// encoding of deliveries with json.Marshal's, over jobs of many shapes.
func TestDeliveryJSONIsWhatJSONMarshalWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	strs := []string{"", "a", "queue-1", "caf\u00e9", "quote\"d", "back\\slash", "<&>", "\u2028", "tab\there", "\xff"}
	raws := []json.RawMessage{nil, nil, nil, json.RawMessage(`null`), json.RawMessage(`{"a": [1, {"b": "]"}], "c": "x y"}`),
		json.RawMessage(`{"sent_at": 0}`), json.RawMessage(`{"sent_at": 0}`), json.RawMessage(`[{"tool": "sh"}]`),
		json.RawMessage(`"s"`), json.RawMessage(`[]`), json.RawMessage(`12.5`), json.RawMessage(`{"h": "<b>"}`),
		json.RawMessage(`{"u": "\u2028"}`), json.RawMessage(`{"bad": `), json.RawMessage(`{"e": "caf\u00e9 \ud83d\ude00"}`)}
	pick := func() string { // mostly what agq's names look like
		if rng.IntN(8) == 0 {
			return strs[rng.IntN(len(strs))]
		}
		return "name-" + strconv.Itoa(rng.IntN(1000))
	}
	fast := 0
	for range 3000 {
		token := pick()
		j := records.Job{ID: pick(), Queue: pick(), Type: pick(), Attempt: rng.IntN(5), MaxAttempts: rng.IntN(30),
			Priority: rng.IntN(200) - 100, TimeoutSeconds: rng.IntN(100000), Plan: raws[rng.IntN(len(raws))],
			Inputs: raws[rng.IntN(len(raws))], Payload: raws[rng.IntN(len(raws))], TraceParent: pick(), TraceState: pick()}
		if rng.IntN(2) == 0 {
			j.Status, j.Delivery = records.StatusRunning, &token
		}
		switch rng.IntN(4) {
		case 0:
			j.Requires = []string{pick(), pick()}
		case 1:
			j.Requires = []string{}
		}
		if rng.IntN(10) == 0 {
			j.Parents = map[string]records.ParentState{"p": {Status: "completed"}}
		}
		if rng.IntN(3) == 0 {
			j.FairKey = pick()
		}
		d := deliveryFor(j)
		want, _ := json.Marshal(d)
		if got, ok := appendDelivery(nil, &d); ok {
			fast++
			if !bytes.Equal(got, want) {
				t.Fatalf("job %+v:\n got  %s\n want %s", j, got, want)
			}
		}
		if got := deliveryJSON(j); !bytes.Equal(got, want) {
			t.Fatalf("deliveryJSON of %+v:\n got  %s\n want %s", j, got, want)
		}
	}
	if fast < 100 {
		t.Fatalf("only %d of 3000 deliveries written without json.Marshal", fast)
	}
}
