package benchutil

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.95: 95, 0.99: 99, 1: 100, 0: 1} {
		if got := Quantile(d, q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if d[0] != 100 {
		t.Error("input was sorted in place")
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("empty input")
	}
}
