// Go baseline of BM_Channel_EchoRing30000 and BM_FiberChannel_EchoRing30000
// (benchmark/coro/channel_benchmark.cc) and of their memory figures
// (benchmark/coro/channel_memory.cc).
//
// 30,000 goroutines each own a `chan int64` of capacity 1 and echo every value received
// on it to the driver over one shared `chan int64` of capacity 1. A round sends one value
// to every echoer, then receives 30,000 echoes (and checks their sum). GOMAXPROCS(1), as
// the C++ side runs on ThreadPool(1).
//
// Output: Google Benchmark-style JSON, one entry per repetition. real_time (wall) and
// cpu_time (the process's CPU time) are nanoseconds per hop: a round is 60,000 hops
// (30,000 values out, 30,000 back), each of which makes a blocked goroutine runnable, so
// this is the time per switch. Every entry also carries "bytes_per_task": the growth of
// the resident set per echoer (its goroutine, its stack and its channel), measured once,
// at the first start, in a fresh process.
//
//	go run ./benchmark/go/channel_echo_ring [-repetitions 5] [-rounds 1000] [-tasks 30000]
package main

import (
	"flag"
	"runtime"
	"runtime/debug"
	"time"

	"weft/benchmark/go/internal/gbench"
)

type ring struct {
	ins  []chan int64
	out  chan int64
	done chan struct{}
}

func startRing(tasks int) *ring {
	r := &ring{ins: make([]chan int64, tasks), out: make(chan int64, 1), done: make(chan struct{})}
	for i := range r.ins {
		r.ins[i] = make(chan int64, 1)
	}
	for i := range r.ins {
		go func(in chan int64) {
			for v := range in {
				r.out <- v
			}
			r.done <- struct{}{}
		}(r.ins[i])
	}
	return r
}

// runRounds: each round sends i to echoer i and collects every echo.
func (r *ring) runRounds(rounds int) {
	tasks := int64(len(r.ins))
	want := tasks * (tasks - 1) / 2
	for round := 0; round < rounds; round++ {
		for i, in := range r.ins {
			in <- int64(i)
		}
		var sum int64
		for i := int64(0); i < tasks; i++ {
			sum += <-r.out
		}
		if sum != want {
			panic("echo ring lost or duplicated a value")
		}
	}
}

func (r *ring) stop() {
	for _, in := range r.ins {
		close(in)
	}
	for range r.ins {
		<-r.done
	}
}

func main() {
	repetitions := flag.Int("repetitions", 5, "repetitions")
	rounds := flag.Int("rounds", 1000, "rounds per repetition")
	tasks := flag.Int("tasks", 30000, "echo goroutines")
	flag.Parse()
	runtime.GOMAXPROCS(1)

	// Memory, first, in a fresh process: the slice headers and channels are part of
	// what each echoer costs, as the C++ side counts its channels.
	runtime.GC()
	debug.FreeOSMemory()
	before := gbench.ResidentBytes()
	r := startRing(*tasks)
	r.runRounds(1) // every goroutine has run and parked on its channel
	bytesPerTask := float64(gbench.ResidentBytes()-before) / float64(*tasks)
	r.runRounds(*rounds / 10) // warm-up

	var entries []gbench.Entry
	hops := int64(*rounds) * int64(*tasks) * 2
	for rep := 0; rep < *repetitions; rep++ {
		start, startCPU := time.Now(), gbench.CPUTime()
		r.runRounds(*rounds)
		wall, cpu := time.Since(start), gbench.CPUTime()-startCPU
		e := gbench.Iteration("Go_Channel_EchoRing30000", rep, *repetitions, hops, wall, cpu)
		e.BytesPerTask = bytesPerTask
		entries = append(entries, e)
	}
	r.stop()
	gbench.Print(entries)
}
