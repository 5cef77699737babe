package main

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAddedLatency-2   	    2000	    561165 ns/op	        66.0 direct-p50-µs	      1270 direct-p99-µs	       185.0 proxy-p50-µs	      3500 proxy-p99-µs	       119.0 added-p50-µs
BenchmarkPooledRun-2      	      30	  12000000 ns/op	         9.7 pooled-p50-ms	        14 pooled-p95-ms	        20 pooled-p99-ms	       215 cold-p50-ms	       260 cold-p99-ms
BenchmarkThroughput-2     	       1	         0 ns/op	        40 raw-runc-c1-per-s	        70 raw-runc-c4-per-s	        35 runc-c1-per-s	        60 runc-c4-per-s	     0.86 runc/raw-c4-ratio
BenchmarkNothingToPlot-2  	     100	      1000 ns/op
PASS
`

func TestPlots(t *testing.T) {
	dir := t.TempDir()
	files, err := plotAll(strings.NewReader(sample), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"AddedLatency-latency.svg", "PooledRun-latency.svg", "Throughput-throughput.svg"}
	if len(files) != len(want) {
		t.Fatalf("files %v", files)
	}
	for i, f := range files {
		if filepath.Base(f) != want[i] {
			t.Errorf("file %d is %s, want %s", i, f, want[i])
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", f, err)
			}
		}
	}
	// The bars are to scale (logarithmic): 66 µs and 185 µs on a 0.01-10 ms axis.
	b, _ := os.ReadFile(files[0])
	widths := map[string]float64{}
	for _, m := range regexp.MustCompile(`width="([0-9.]+)" height="\d+" fill="[^"]+"><title>(\w+) p50`).FindAllStringSubmatch(string(b), -1) {
		widths[m[2]], _ = strconv.ParseFloat(m[1], 64)
	}
	plotW := float64(width - left - right)
	for name, v := range map[string]float64{"direct": 0.066, "proxy": 0.185} {
		want := (math.Log10(v) + 2) / 3 * plotW
		if math.Abs(widths[name]-want) > 0.5 {
			t.Errorf("%s bar %.1f wide, want %.1f", name, widths[name], want)
		}
	}
	if !strings.Contains(string(b), ">p99 3.5 ms<") || strings.Contains(string(b), "added") {
		t.Errorf("latency plot: p99 tick or a non-side metric:\n%s", b)
	}
	b, _ = os.ReadFile(files[1])
	if !strings.Contains(string(b), ">pooled<") || !strings.Contains(string(b), ">cold<") {
		t.Errorf("pool vs cold plot:\n%s", b)
	}
	b, _ = os.ReadFile(files[2])
	if strings.Count(string(b), "<polyline") != 2 || !strings.Contains(string(b), "raw-runc at 4: 70/s") || strings.Contains(string(b), "ratio") {
		t.Errorf("throughput plot:\n%s", b)
	}
}

func TestParseKeepsTheLastCount(t *testing.T) {
	rs := parse(strings.NewReader("BenchmarkX-2 10 1 ns/op 5 a-p50-ms\nBenchmarkX-2 10 1 ns/op 7 a-p50-ms\nBenchmarkY/sub=1-8 1 2 ns/op\n"))
	if len(rs) != 2 || rs[0].metrics["a-p50-ms"] != 7 || rs[1].name != "Y/sub=1" {
		t.Errorf("%+v", rs)
	}
	if fileName("Y/sub=1") != "Y_sub_1" {
		t.Errorf("file name %q", fileName("Y/sub=1"))
	}
}
