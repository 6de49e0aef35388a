package plainjson

import (
	"encoding/json"
	"testing"
)

func TestMarshalLeavesHTMLAsItIsAndEndsWithoutANewline(t *testing.T) {
	v := map[string]any{"output": "<b>a & b</b>\n", "n": 1}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":1,"output":"<b>a & b</b>\n"}`; string(got) != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil || back["output"] != v["output"] {
		t.Fatalf("read back: %v, %v", back, err)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Fatal("a func was encoded")
	}
}
