// Package testutil holds helpers the project's tests share.
package testutil

import (
	"fmt"
	"testing"
	"time"
)

// WaitFor and Eventually check their condition at once, then after
// MinPoll, doubling the pause up to MaxPoll: a condition that comes quickly
// is seen quickly, and a costly one (a process started, a request sent) is
// not run hundreds of times a second through a long wait.
const (
	MinPoll = time.Millisecond
	MaxPoll = 100 * time.Millisecond
)

// backoff returns the pause after d.
func backoff(d time.Duration) time.Duration {
	return min(2*d, MaxPoll)
}

// WaitFor waits until cond reports true, checking it at once and then with
// pauses from MinPoll to MaxPoll, and fails the test (t.Fatalf) when timeout passes first:
//
//	timed out after 5s waiting for <what>: <cond's last error>
//
// cond's error is not fatal: it says why the condition does not hold yet
// (the state it saw), and is shown only if the wait times out. A cond that
// finds something that will never come right calls t.Fatal itself (it runs
// on the test's goroutine). WaitFor replaces time.Sleep as a way to wait
// for something to happen: it returns as soon as it has.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := Poll(timeout, what, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

// Poll is WaitFor for a goroutine that is not the test's (which must not
// call t.Fatal): it checks cond as WaitFor does and returns nil once cond
// holds, or, when timeout passes first, WaitFor's message as an error.
func Poll(timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	pause := MinPoll
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("timed out after %v waiting for %s: %w", timeout, what, err)
			}
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = backoff(pause)
	}
}

// Eventually reports whether cond holds within timeout, checking it as
// WaitFor does; for a test that reports the failure itself, or
// that expects the condition not to come.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := MinPoll
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = backoff(pause)
	}
}
