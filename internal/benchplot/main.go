// Command benchplot turns `go test -bench` output into SVG pictures next to
// docs/benchmarks.md: for each benchmark that reports latency quantiles per side
// (metrics named <side>-p50-µs, <side>-p99-ms, ...), bars of every side's p50 with its
// p95/p99 marked, so the raw client, the proxy or the pool and the cold path sit side
// by side; for each benchmark that reports rates per concurrency (<side>-c<N>-per-s),
// a line per side over the concurrency. scripts/bench.sh runs it after the benchmarks:
//
//	go run ./internal/benchplot -out docs/bench < bench-output.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	out := flag.String("out", "docs/bench", "output `directory` for the SVG files")
	flag.Parse()
	files, err := plotAll(os.Stdin, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}

// result is one benchmark line: its name (without the -N CPU suffix) and metrics.
type result struct {
	name    string
	metrics map[string]float64
	order   []string
}

var cpuSuffix = regexp.MustCompile(`-\d+$`)

// parse reads benchmark lines; later lines of the same benchmark (-count) win.
func parse(r io.Reader) []result {
	var out []result
	idx := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		res := result{name: cpuSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), ""), metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.metrics[f[i+1]] = v
			res.order = append(res.order, f[i+1])
		}
		if i, ok := idx[res.name]; ok {
			out[i] = res
			continue
		}
		idx[res.name] = len(out)
		out = append(out, res)
	}
	return out
}

var (
	quantileRe = regexp.MustCompile(`^(.+)-(p50|p95|p99)-(µs|us|ms|s)$`)
	rateRe     = regexp.MustCompile(`^(.+)-c(\d+)-per-s$`)
)

// side is one bar group: a side's quantiles in milliseconds.
type side struct {
	name          string
	p50, p95, p99 float64
}

func latencySides(r result) []side {
	by := map[string]*side{}
	var order []string
	for _, k := range r.order {
		m := quantileRe.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		v := r.metrics[k]
		switch m[3] {
		case "µs", "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		s := by[m[1]]
		if s == nil {
			s = &side{name: m[1]}
			by[m[1]] = s
			order = append(order, m[1])
		}
		switch m[2] {
		case "p50":
			s.p50 = v
		case "p95":
			s.p95 = v
		case "p99":
			s.p99 = v
		}
	}
	var out []side
	for _, n := range order {
		// A distribution has a tail: a lone p50 is a derived figure ("added-p50").
		if s := by[n]; s.p50 > 0 && (s.p95 > 0 || s.p99 > 0) {
			out = append(out, *s)
		}
	}
	return out
}

// series is one line of a throughput plot: rate by concurrency.
type series struct {
	name   string
	points [][2]float64
}

func rateSeries(r result) []series {
	by := map[string]*series{}
	var order []string
	for _, k := range r.order {
		m := rateRe.FindStringSubmatch(k)
		if m == nil {
			continue
		}
		c, _ := strconv.Atoi(m[2])
		s := by[m[1]]
		if s == nil {
			s = &series{name: m[1]}
			by[m[1]] = s
			order = append(order, m[1])
		}
		s.points = append(s.points, [2]float64{float64(c), r.metrics[k]})
	}
	var out []series
	for _, n := range order {
		sort.Slice(by[n].points, func(i, j int) bool { return by[n].points[i][0] < by[n].points[j][0] })
		out = append(out, *by[n])
	}
	return out
}

// plotAll writes one SVG per plottable benchmark into dir and returns their paths.
func plotAll(r io.Reader, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name, svg string) error {
		p := filepath.Join(dir, name)
		files = append(files, p)
		return os.WriteFile(p, []byte(svg), 0o644)
	}
	for _, res := range parse(r) {
		base := fileName(res.name)
		if s := latencySides(res); len(s) > 0 {
			if err := write(base+"-latency.svg", latencySVG(res.name, s)); err != nil {
				return nil, err
			}
		}
		if s := rateSeries(res); len(s) > 0 {
			if err := write(base+"-throughput.svg", throughputSVG(res.name, s)); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func fileName(bench string) string {
	return strings.Trim(unsafeName.ReplaceAllString(bench, "_"), "_")
}
