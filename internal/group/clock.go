package group

import "time"

// clock is the time a group reads and waits on. Its unit tests give it a
// fake one, so that grace periods, back-off, drains and replace_after take
// no real time.
type clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// function that stops it.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
	// NewTicker returns a channel that receives every d (dropping ticks
	// nobody takes, like time.Ticker), and a function that stops it.
	NewTicker(d time.Duration) (<-chan time.Time, func())
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func())
}

// wallClock is the clock outside tests.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (wallClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

func (wallClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }
