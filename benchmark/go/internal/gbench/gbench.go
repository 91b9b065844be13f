// Package gbench holds what weft's Go comparison programs (benchmark/go/<name>/) share:
// the Google Benchmark-style JSON they print, which benchmark/support/report.py reads
// like the C++ results, the process's CPU time, and its resident set.
package gbench

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Entry is one repetition of one benchmark, with the keys of Google Benchmark's JSON.
type Entry struct {
	Name            string  `json:"name"`
	RunName         string  `json:"run_name"`
	RunType         string  `json:"run_type"`
	RepetitionIndex int     `json:"repetition_index"`
	Repetitions     int     `json:"repetitions"`
	Iterations      int64   `json:"iterations"`
	RealTime        float64 `json:"real_time"`
	CPUTime         float64 `json:"cpu_time"`
	TimeUnit        string  `json:"time_unit"`
	// The echo ring's memory figure (benchmark/go/channel_echo_ring); absent elsewhere.
	BytesPerTask float64 `json:"bytes_per_task,omitempty"`
}

// Iteration is the entry of repetition `rep` (of `reps`) of `name`: `n` iterations that
// took `wall` and `cpu`, reported in nanoseconds per iteration.
func Iteration(name string, rep, reps int, n int64, wall, cpu time.Duration) Entry {
	return Entry{
		Name: name, RunName: name, RunType: "iteration", RepetitionIndex: rep,
		Repetitions: reps, Iterations: n,
		RealTime: float64(wall.Nanoseconds()) / float64(n),
		CPUTime:  float64(cpu.Nanoseconds()) / float64(n), TimeUnit: "ns",
	}
}

// Print writes {"benchmarks": entries} to stdout.
func Print(entries []Entry) {
	PrintJSON(struct {
		Benchmarks []Entry `json:"benchmarks"`
	}{entries})
}

// PrintJSON writes v to stdout as indented JSON; panics if it cannot.
func PrintJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
}

// CPUTime is the CPU time (user + system) this process has used so far. With
// GOMAXPROCS(1) nearly all of it is the one thread running goroutines, so it is the
// counterpart of Google Benchmark's cpu_time, and unlike wall time it does not grow when
// other processes share the machine.
func CPUTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// ResidentBytes is the resident set size of this process (/proc/self/statm).
func ResidentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	fields := strings.Fields(string(data))
	if len(fields) < 2 {
		panic("unexpected /proc/self/statm: " + string(data))
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return pages * int64(os.Getpagesize())
}
