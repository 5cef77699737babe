package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

const (
	width  = 760
	rowH   = 28
	left   = 210
	right  = 40
	top    = 48
	bottom = 44
)

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"}

// latencySVG draws each side's p50 as a bar, and p95 and p99 as ticks on a line
// from the bar's end: the distribution side by side, on one logarithmic scale (a
// loaded machine's p99 can be a hundred times its p50).
func latencySVG(title string, sides []side) string {
	h := top + rowH*len(sides) + bottom
	lo, hi := math.Inf(1), 0.0
	for _, s := range sides {
		lo = math.Min(lo, s.p50)
		hi = math.Max(hi, math.Max(s.p50, math.Max(s.p95, s.p99)))
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	plotW := float64(width - left - right)
	x := func(v float64) float64 {
		return left + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	var b strings.Builder
	header(&b, width, h, title+": latency (bar p50, ticks p95 and p99; log scale)")
	logAxis(&b, lo, hi, "ms", h, x)
	for i, s := range sides {
		y := float64(top + i*rowH)
		c := palette[i%len(palette)]
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-size="12">%s</text>`+"\n", left-8, y+rowH/2+4, html.EscapeString(s.name))
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s p50 %s ms</title></rect>`+"\n",
			left, y+5, x(s.p50)-left, rowH-10, c, html.EscapeString(s.name), num(s.p50))
		tail := math.Max(s.p95, s.p99)
		if tail > s.p50 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x(s.p50), y+rowH/2, x(tail), y+rowH/2)
		}
		for _, q := range []struct {
			v    float64
			name string
		}{{s.p95, "p95"}, {s.p99, "p99"}} {
			if q.v > 0 {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="2"><title>%s %s ms</title></line>`+"\n",
					x(q.v), y+7, x(q.v), y+rowH-7, q.name, num(q.v))
			}
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#222">%s</text>`+"\n", x(tail)+4, y+rowH/2+4, num(s.p50)+" ms")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// throughputSVG draws one line per side: completed runs per second by concurrency.
func throughputSVG(title string, ss []series) string {
	h := 340
	maxX, maxY := 0.0, 0.0
	for _, s := range ss {
		for _, p := range s.points {
			maxX, maxY = math.Max(maxX, p[0]), math.Max(maxY, p[1])
		}
	}
	scaleY := niceCeil(maxY)
	plotW, plotH := float64(width-left-right), float64(h-top-bottom)
	x := func(v float64) float64 {
		if maxX <= 1 {
			return left
		}
		return left + (math.Log2(v)/math.Log2(maxX))*plotW
	}
	y := func(v float64) float64 { return float64(top) + plotH - v/scaleY*plotH }
	var b strings.Builder
	header(&b, width, h, title+": throughput by concurrency (per second)")
	for i := 0; i <= 4; i++ {
		v := scaleY * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>`+"\n",
			left, y(v), width-right, y(v), left-6, y(v)+4, num(v))
	}
	seen := map[float64]bool{}
	for _, s := range ss {
		for _, p := range s.points {
			if !seen[p[0]] {
				seen[p[0]] = true
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n", x(p[0]), h-bottom+16, num(p[0]))
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" font-size="11">concurrent runs</text>`+"\n", left+int(plotW/2), h-8)
	for i, s := range ss {
		c := palette[i%len(palette)]
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at %s: %s/s</title></circle>`+"\n", x(p[0]), y(p[1]), c, html.EscapeString(s.name), num(p[0]), num(p[1]))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" font-size="11">%s</text>`+"\n",
			12, top+i*16, c, 26, top+i*16+9, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func header(b *strings.Builder, w, h int, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", w, h, w, h)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/><text x="12" y="24" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
}

func logAxis(b *strings.Builder, lo, hi float64, unit string, h int, x func(float64) float64) {
	for v := lo; v <= hi*1.0001; v *= 10 {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>`+"\n",
			x(v), top-4, x(v), h-bottom+4, x(v), h-bottom+18, num(v))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-size="11">%s</text>`+"\n", width-right, h-8, unit)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.3g", v)
}
