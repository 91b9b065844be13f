// Go baseline of BM_Channel_PingPong and BM_FiberChannel_PingPong
// (benchmark/coro/channel_benchmark.cc): two goroutines bounce a value over two
// unbuffered channels with GOMAXPROCS(1), one goroutine switch per message.
//
// Prints Google Benchmark-style JSON (one entry per repetition) so that
// benchmark/support/report.py reads it like the C++ results. real_time (wall) and
// cpu_time (the process's CPU time) are nanoseconds per message (one send received by
// the other goroutine).
//
//	go run ./benchmark/go/channel_pingpong [-repetitions 9] [-messages 2000000]
package main

import (
	"encoding/json"
	"flag"
	"os"
	"runtime"
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
}

// pingPong sends `messages` values back and forth (messages/2 round trips) and returns
// the elapsed wall time and CPU time.
func pingPong(messages int64) (time.Duration, time.Duration) {
	ping := make(chan int64)
	pong := make(chan int64)
	done := make(chan struct{})
	go func() {
		for v := range ping {
			pong <- v + 1
		}
		close(done)
	}()
	start, startCPU := time.Now(), cpuTime()
	var v int64
	for i := int64(0); i < messages/2; i++ {
		ping <- v
		v = <-pong
	}
	elapsed, elapsedCPU := time.Since(start), cpuTime()-startCPU
	close(ping)
	<-done
	if v != messages/2 {
		panic("ping-pong lost a message")
	}
	return elapsed, elapsedCPU
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
	repetitions := flag.Int("repetitions", 9, "repetitions")
	messages := flag.Int64("messages", 2000000, "messages per repetition (even)")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	pingPong(*messages / 10) // warm-up
	out := struct {
		Benchmarks []entry `json:"benchmarks"`
	}{}
	for r := 0; r < *repetitions; r++ {
		wall, cpu := pingPong(*messages)
		out.Benchmarks = append(out.Benchmarks, entry{
			Name: "Go_Channel_PingPong", RunName: "Go_Channel_PingPong", RunType: "iteration",
			RepetitionIndex: r, Repetitions: *repetitions, Iterations: *messages,
			RealTime: float64(wall.Nanoseconds()) / float64(*messages),
			CPUTime:  float64(cpu.Nanoseconds()) / float64(*messages), TimeUnit: "ns",
		})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
