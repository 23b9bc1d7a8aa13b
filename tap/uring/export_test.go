package uring

// SetHookBeforeCancel makes f run whenever a woken idle reader is about to
// end its multishot read (nil: nothing).
func SetHookBeforeCancel(f func()) { hookBeforeCancel = f }

// SetHookBeforeWait makes f run each time p's reader is about to sleep in
// io_uring_enter for frames (nil: nothing). Set it before the Read it is
// for starts, from the goroutine that hands that Read its turn.
func SetHookBeforeWait(p *Port, f func()) { p.rx.beforeWait = f }

// Blocked returns a channel that receives when p's reader is about to
// sleep in its ring (SetHookBeforeWait); a signal not taken is dropped.
func Blocked(p *Port) chan struct{} {
	ch := make(chan struct{}, 1)
	SetHookBeforeWait(p, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch
}
