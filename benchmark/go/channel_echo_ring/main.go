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
// cpu_time (the process's CPU time) are nanoseconds per hop: a round is 60,000 hops (30,000 values out, 30,000 back), each
// of which makes a blocked goroutine runnable, so this is the time per switch. Every
// entry also carries "bytes_per_task": the growth of the resident set per echoer (its
// goroutine, its stack and its channel), measured once, at the first start, in a fresh
// process.
//
//	go run ./benchmark/go/channel_echo_ring [-repetitions 5] [-rounds 1000] [-tasks 30000]
package main

import (
	"encoding/json"
	"flag"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type entry struct {
	Name            string  `json:"name"`
	RunName         string  `json:"run_name"`
	RunType         string  `json:"run_type"`
	RepetitionIndex int     `json:"repetition_index"`
	Repetitions     int     `json:"repetitions"`
	Iterations      int64   `json:"iterations"`
	RealTime        float64 `json:"real_time"`
	CPUTime         float64 `json:"cpu_time"`
	TimeUnit        string  `json:"time_unit"`
	BytesPerTask    float64 `json:"bytes_per_task"`
}

// residentBytes: the resident set size of this process (/proc/self/statm).
func residentBytes() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		panic(err)
	}
	fields := strings.Fields(string(data))
	pages, err := strconv.ParseFloat(fields[1], 64)
	if err != nil {
		panic(err)
	}
	return pages * float64(os.Getpagesize())
}

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

// cpuTime: the CPU time (user + system) this process has used so far. With
// GOMAXPROCS(1) nearly all of it is the one thread running goroutines, so it is the
// counterpart of Google Benchmark's cpu_time, and unlike wall time it does not grow when
// other processes share the machine.
func cpuTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
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
	before := residentBytes()
	r := startRing(*tasks)
	r.runRounds(1) // every goroutine has run and parked on its channel
	bytesPerTask := (residentBytes() - before) / float64(*tasks)
	r.runRounds(*rounds / 10) // warm-up

	out := struct {
		Benchmarks []entry `json:"benchmarks"`
	}{}
	hops := int64(*rounds) * int64(*tasks) * 2
	for rep := 0; rep < *repetitions; rep++ {
		start, startCPU := time.Now(), cpuTime()
		r.runRounds(*rounds)
		wall, cpu := time.Since(start), cpuTime()-startCPU
		out.Benchmarks = append(out.Benchmarks, entry{
			Name: "Go_Channel_EchoRing30000", RunName: "Go_Channel_EchoRing30000",
			RunType: "iteration", RepetitionIndex: rep, Repetitions: *repetitions,
			Iterations: hops, RealTime: float64(wall.Nanoseconds()) / float64(hops),
			CPUTime: float64(cpu.Nanoseconds()) / float64(hops), TimeUnit: "ns",
			BytesPerTask: bytesPerTask,
		})
	}
	r.stop()
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
