package uring

// SetHookBeforeCancel makes f run whenever a woken idle reader is about to
// end its multishot read (nil: nothing).
func SetHookBeforeCancel(f func()) { hookBeforeCancel = f }
