package compare

import (
	"errors"
	"testing"
)

// lossModel is a dataplane that forwards up to capacity frames/s whole and
// drops what is offered beyond it; stall, if set, adds marginal loss to the
// trial with that index (a stray stall of the machine).
type lossModel struct {
	capacity float64
	stall    map[int]float64
	rates    []int
}

func (m *lossModel) trial(rate int) (float64, float64, error) {
	n := len(m.rates)
	m.rates = append(m.rates, rate)
	r := float64(rate)
	delivered := min(r, m.capacity)
	loss := 1 - delivered/r + m.stall[n]
	return delivered * (1 - m.stall[n]) / 1e3, loss, nil
}

func TestSearchNoDropFindsCapacity(t *testing.T) {
	m := &lossModel{capacity: 110e3}
	got, err := searchNoDrop(640e3, m.trial)
	if err != nil {
		t.Fatal(err)
	}
	if got > 110 || got < 110*(1-2.0/searchRes) {
		t.Errorf("no-loss rate %.1f kpps, want within %d ‰ under 110 (trials at %v)", got, 2000/searchRes, m.rates)
	}
	if len(m.rates) > searchTrials {
		t.Errorf("%d trials, at most %d allowed", len(m.rates), searchTrials)
	}
}

// A stray stall in one trial below capacity is retried, not taken as the
// dataplane's limit: with the old search one such trial halved the result.
func TestSearchNoDropRetriesAStall(t *testing.T) {
	for stalled := 1; stalled < 6; stalled++ {
		m := &lossModel{capacity: 110e3, stall: map[int]float64{stalled: 0.02}}
		got, err := searchNoDrop(640e3, m.trial)
		if err != nil {
			t.Fatal(err)
		}
		if got < 110*(1-2.0/searchRes) {
			t.Errorf("stall in trial %d: no-loss rate %.1f kpps, want near 110 (trials at %v)", stalled, got, m.rates)
		}
	}
}

// A trial that loses much more than a stall explains is not repeated.
func TestSearchNoDropNoRetryOnOverload(t *testing.T) {
	m := &lossModel{capacity: 110e3}
	if _, err := searchNoDrop(640e3, m.trial); err != nil {
		t.Fatal(err)
	}
	retried := 0
	for i := 1; i < len(m.rates); i++ {
		if m.rates[i] != m.rates[i-1] {
			continue
		}
		retried++
		if loss := 1 - m.capacity/float64(m.rates[i]); loss > retryLoss {
			t.Errorf("rate %d tried twice though it lost %.1f %% (trials at %v)", m.rates[i], 100*loss, m.rates)
		}
	}
	if retried == 0 {
		t.Errorf("no rate tried twice, yet the rates just above capacity lose less than a stall (trials at %v)", m.rates)
	}
}

func TestSearchNoDropPassesFlatOut(t *testing.T) {
	m := &lossModel{capacity: 1e9}
	got, err := searchNoDrop(200e3, m.trial)
	if err != nil {
		t.Fatal(err)
	}
	if got != 200 || len(m.rates) != 1 {
		t.Errorf("got %.1f kpps in %d trials, want 200 in 1", got, len(m.rates))
	}
}

// A dataplane that always loses a little never passes; the retries stay
// within the trial bound and the result is 0, not a guess.
func TestSearchNoDropBounded(t *testing.T) {
	n := 0
	got, err := searchNoDrop(640e3, func(rate int) (float64, float64, error) {
		n++
		return float64(rate) / 1e3 * 0.99, 0.01, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 0 || n != searchTrials {
		t.Errorf("got %.1f kpps after %d trials, want 0 after %d", got, n, searchTrials)
	}
}

func TestSearchNoDropError(t *testing.T) {
	boom := errors.New("sink failed")
	_, err := searchNoDrop(640e3, func(int) (float64, float64, error) { return 0, 0, boom })
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want %v", err, boom)
	}
}
