package commands

import (
	"encoding/json"
	"testing"
)

func TestCleanJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":"plain"}`, `{"a":"plain"}`},
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{`{"a":"\udc00x"}`, `{"a":"\ufffdx"}`},
		{`{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\ude00"}`}, // a valid pair stays
		{`{"a":"\\u0000"}`, `{"a":"\\u0000"}`},           // an escaped backslash, not an escape
		{`{"\u0000":1}`, `{"\ufffd":1}`},
		{`["\u0041","\u0000"]`, `["\u0041","\ufffd"]`},
	}
	for _, tt := range tests {
		got := string(cleanJSON([]byte(tt.in)))
		if got != tt.want {
			t.Errorf("cleanJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("cleanJSON(%s) is not valid JSON", tt.in)
		}
	}
}

func FuzzCleanJSON(f *testing.F) {
	for _, s := range []string{`{"a":"x\u0000y"}`, `"\ud800\udc00"`, `"\\u0000"`, `["\udbff"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		out := cleanJSON(raw)
		if !json.Valid(out) || len(out) != len(raw) {
			t.Fatalf("cleanJSON(%q) = %q", raw, out)
		}
	})
}
