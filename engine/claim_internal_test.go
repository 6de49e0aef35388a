package engine

import (
	"reflect"
	"testing"
)

// Kinds of pops sharing a queue of a namespace, directly or through
// another kind, are claimed in one lane, in arrival order; the others in
// lanes of their own.
func TestClaimLanes(t *testing.T) {
	kinds := []struct {
		ns     string
		queues []string
	}{
		{"a", []string{"q1"}},       // 0
		{"a", []string{"q2"}},       // 1
		{"b", []string{"q1"}},       // 2: another namespace's q1
		{"a", []string{"q3", "q1"}}, // 3: joins 0
		{"a", []string{"q4", "q2"}}, // 4: joins 1
		{"a", []string{"q3"}},       // 5: joins 0 through 3
		{"c", []string{"q9"}},       // 6
	}
	lanes := claimLanes(len(kinds), func(i int) (string, []string) { return kinds[i].ns, kinds[i].queues })
	want := [][]int{{0, 3, 5}, {1, 4}, {2}, {6}}
	if !reflect.DeepEqual(lanes, want) {
		t.Fatalf("lanes %v, want %v", lanes, want)
	}
}
