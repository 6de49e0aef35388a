package jsonmsg

import (
	"encoding/json"
	"testing"
)

func TestReasonNamesTheFieldAndTheJSONItMustBe(t *testing.T) {
	var doc struct {
		Priority  int               `json:"priority"`
		Seconds   float64           `json:"seconds"`
		Retryable bool              `json:"retryable"`
		Name      string            `json:"name"`
		Tools     []string          `json:"tools"`
		Tags      map[string]string `json:"tags"`
		Plan      struct {
			Tasks []struct{} `json:"tasks"`
		} `json:"plan"`
	}
	for in, want := range map[string]string{
		`{"priority":1e30}`:           "priority must be a whole number, not number 1e30",
		`{"priority":1.5}`:            "priority must be a whole number, not number 1.5",
		`{"seconds":"1"}`:             "seconds must be a number, not string",
		`{"retryable":"false"}`:       "retryable must be true or false, not string",
		`{"name":3}`:                  "name must be a string, not number",
		`{"tools":"sort"}`:            "tools must be an array, not string",
		`{"tags":[]}`:                 "tags must be an object, not array",
		`{"plan":{"tasks":"x"}}`:      "plan.tasks must be an array, not string",
		`[1]`:                         "must be an object, not array",
		`{"name":`:                    "unexpected end of JSON input",
		`{"name":"a"}{"name":"b"}xyz`: "invalid character '{' after top-level value",
	} {
		err := json.Unmarshal([]byte(in), &doc)
		if err == nil {
			t.Fatalf("%s decoded", in)
		}
		if got := Reason(err); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
