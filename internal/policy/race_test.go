//go:build race

package policy

// raceEnabled: the race detector slows evaluation ~10x; tests over large corpora take a
// sample of them.
const raceEnabled = true
