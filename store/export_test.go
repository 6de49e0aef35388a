package store

// HeldBy is heldBy, for the test that holds it to the rule it stands for.
var HeldBy = heldBy
