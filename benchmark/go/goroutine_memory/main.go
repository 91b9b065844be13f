// Go baseline of benchmark/stackful/fiber_memory: how much memory a blocked goroutine
// costs. Starts 1,000,000 goroutines that each block receiving from their own
// unbuffered channel, reads the resident set before and after (/proc/self/statm), then
// releases them all and checks that every one finished.
//
// Prints Google Benchmark-style JSON with one entry, "Go_Goroutine_Parked" (real_time:
// nanoseconds to start and park one goroutine), plus the memory keys the C++ *_memory
// programs print: goroutines, rss_before_bytes, rss_parked_bytes,
// parked_bytes_per_goroutine.
//
//	go run ./goroutine_memory [-goroutines 1000000]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	var pages, resident int64
	if _, err := fmt.Sscan(string(data), &pages, &resident); err != nil {
		panic(err)
	}
	return resident * int64(os.Getpagesize())
}

func main() {
	n := flag.Int("goroutines", 1000000, "goroutines to park")
	flag.Parse()

	// The channels and the WaitGroup are allocated (and touched) first: what is measured
	// is the goroutines.
	channels := make([]chan struct{}, *n)
	for i := range channels {
		channels[i] = make(chan struct{})
	}
	var started, finished sync.WaitGroup
	runtime.GC()
	before := residentBytes()

	start := time.Now()
	started.Add(*n)
	finished.Add(*n)
	for i := 0; i < *n; i++ {
		go func(c chan struct{}) {
			started.Done()
			<-c
			finished.Done()
		}(channels[i])
	}
	started.Wait()
	elapsed := time.Since(start)
	parked := residentBytes()

	for _, c := range channels {
		close(c)
	}
	finished.Wait()

	perGoroutine := float64(parked-before) / float64(*n)
	ns := float64(elapsed.Nanoseconds()) / float64(*n)
	out := map[string]interface{}{
		"benchmarks": []map[string]interface{}{{
			"name": "Go_Goroutine_Parked", "run_name": "Go_Goroutine_Parked",
			"run_type": "iteration", "repetition_index": 0, "repetitions": 1,
			"iterations": *n, "real_time": ns, "cpu_time": ns, "time_unit": "ns",
			"goroutines": *n, "rss_before_bytes": before, "rss_parked_bytes": parked,
			"parked_bytes_per_goroutine": perGoroutine,
		}},
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
