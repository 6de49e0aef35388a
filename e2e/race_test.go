//go:build race

package e2e

// raceEnabled says the tests run with -race; agw is then built with it too.
const raceEnabled = true
