package commands

import (
	"encoding/json"
	"testing"
)

func TestUnstorableText(t *testing.T) {
	tests := []struct{ in, path, problem string }{
		{`{"a":"plain","b":[1,"\u0041"]}`, "", ""},
		{`{"payload":{"s":"a\u0000b"}}`, "payload.s", `contains \u0000`},
		{`{"a":"\ud800"}`, "a", `contains \ud800, half of a surrogate pair`},
		{`{"a":"ok","b":["x","\udc00x"]}`, "b[1]", `contains \udc00, half of a surrogate pair`},
		{`{"a":"\ud83d\ude00"}`, "", ""}, // a valid pair
		{`{"a":"\\u0000"}`, "", ""},      // an escaped backslash, not an escape
		{`{"a":{"b":1},"c":[{"d":"\u0000"}]}`, "c[0].d", `contains \u0000`},
		{`{"\u0000":1}`, "\\u0000", `a key contains \u0000`},
		{`"\u0000"`, "", `contains \u0000`},
	}
	for _, tt := range tests {
		path, problem, found := unstorableText([]byte(tt.in))
		if found != (tt.problem != "") || path != tt.path || problem != tt.problem {
			t.Errorf("unstorableText(%s) = %q, %q, %v; want %q, %q", tt.in, path, problem, found, tt.path, tt.problem)
		}
	}
}

func FuzzUnstorableText(f *testing.F) {
	for _, s := range []string{`{"a":"x\u0000y"}`, `"\ud800\udc00"`, `"\\u0000"`, `["\udbff"]`, `{"a":[{"b":"\u0000"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		_, _, found := unstorableText(raw) // must not panic on any valid JSON
		var v any
		if json.Unmarshal(raw, &v) == nil && found && !hasEscape(raw) {
			t.Fatalf("unstorableText(%q) found a problem in text without escapes", raw)
		}
	})
}

func hasEscape(raw []byte) bool {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] == '\\' && raw[i+1] == 'u' {
			return true
		}
	}
	return false
}
