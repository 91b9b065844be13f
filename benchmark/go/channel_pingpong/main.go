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
	"flag"
	"runtime"
	"time"

	"weft/benchmark/go/internal/gbench"
)

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
	start, startCPU := time.Now(), gbench.CPUTime()
	var v int64
	for i := int64(0); i < messages/2; i++ {
		ping <- v
		v = <-pong
	}
	elapsed, elapsedCPU := time.Since(start), gbench.CPUTime()-startCPU
	close(ping)
	<-done
	if v != messages/2 {
		panic("ping-pong lost a message")
	}
	return elapsed, elapsedCPU
}

func main() {
	repetitions := flag.Int("repetitions", 9, "repetitions")
	messages := flag.Int64("messages", 2000000, "messages per repetition (even)")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	pingPong(*messages / 10) // warm-up
	var entries []gbench.Entry
	for r := 0; r < *repetitions; r++ {
		wall, cpu := pingPong(*messages)
		entries = append(entries,
			gbench.Iteration("Go_Channel_PingPong", r, *repetitions, *messages, wall, cpu))
	}
	gbench.Print(entries)
}
