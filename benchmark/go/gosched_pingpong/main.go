// Go baseline of BM_Fiber_YieldViaExecutor (benchmark/stackful/fiber_benchmark.cc): two
// goroutines alternate through runtime.Gosched() with GOMAXPROCS(1), so each Gosched is
// one switch from one goroutine to the other (the scheduler's run queue holds exactly
// the other one).
//
// Also Go_Goroutine_SpawnRun, the baseline of BM_Fiber_CreateRunDestroy: a `go`
// statement whose trivial body runs to the end, waited for with a sync.WaitGroup.
//
// Prints Google Benchmark-style JSON (one entry per repetition) so that
// benchmark/support/report.py reads it like the C++ results. real_time and cpu_time are
// nanoseconds per Gosched (per spawned goroutine for SpawnRun).
//
//	go run ./gosched_pingpong [-repetitions 9] [-switches 4000000] [-spawns 1000000]
package main

import (
	"flag"
	"runtime"
	"sync"
	"time"

	"weft/benchmark/go/internal/gbench"
)

// pingPong runs two goroutines that each call runtime.Gosched() switches/2 times and
// returns the elapsed wall time.
func pingPong(switches int64) time.Duration {
	var wg sync.WaitGroup
	var counts [2]int64
	start := time.Now()
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := int64(0); i < switches/2; i++ {
				counts[g]++
				runtime.Gosched()
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if counts[0]+counts[1] != switches/2*2 {
		panic("gosched ping-pong lost a switch")
	}
	return elapsed
}

// spawnRun starts n goroutines with a trivial body, one after another (each waited for
// before the next starts, like BM_Fiber_CreateRunDestroy), and returns the wall time.
func spawnRun(n int64) time.Duration {
	var wg sync.WaitGroup
	var ran int64
	start := time.Now()
	for i := int64(0); i < n; i++ {
		wg.Add(1)
		go func() {
			ran++
			wg.Done()
		}()
		wg.Wait()
	}
	elapsed := time.Since(start)
	if ran != n {
		panic("a goroutine did not run")
	}
	return elapsed
}

func main() {
	repetitions := flag.Int("repetitions", 9, "repetitions")
	switches := flag.Int64("switches", 4000000, "Gosched calls per repetition (even)")
	spawns := flag.Int64("spawns", 1000000, "goroutines spawned per repetition")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	pingPong(*switches / 10) // warm-up
	spawnRun(*spawns / 10)
	var out []gbench.Entry
	add := func(name string, r int, n int64, d time.Duration) {
		// With GOMAXPROCS(1) the process CPU time is the wall time (nothing else runs).
		out = append(out, gbench.Iteration(name, r, *repetitions, n, d, d))
	}
	// Interleaved, as --benchmark_enable_random_interleaving does for the C++ side.
	for r := 0; r < *repetitions; r++ {
		add("Go_Gosched_PingPong", r, *switches, pingPong(*switches))
		add("Go_Goroutine_SpawnRun", r, *spawns, spawnRun(*spawns))
	}
	gbench.Print(out)
}
