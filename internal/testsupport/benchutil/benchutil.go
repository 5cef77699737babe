// Package benchutil holds the helpers the benchmarks share: quantiles of alternated
// samples, reported as benchmark metrics, so figures from one run can be compared
// side by side as ratios.
package benchutil

import (
	"slices"
	"testing"
	"time"
)

// Quantile returns the q-quantile (0..1) of d, nearest rank; d is not modified.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i, 1), len(s))-1]
}

// Report reports the p50, p95 and p99 of d in milliseconds as name-p50-ms and so on,
// and returns the p50.
func Report(b *testing.B, name string, d []time.Duration) time.Duration {
	for _, q := range []struct {
		suffix string
		q      float64
	}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
		b.ReportMetric(ms(Quantile(d, q.q)), name+"-"+q.suffix+"-ms")
	}
	return Quantile(d, 0.5)
}

// Ratio reports a/b as name.
func Ratio(b *testing.B, name string, num, den time.Duration) {
	if den > 0 {
		b.ReportMetric(float64(num)/float64(den), name)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
