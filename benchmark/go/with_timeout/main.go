// Go counterpart of benchmark/coro/with_timeout_benchmark.cc (issue #29, item 3): what
// context.WithTimeout costs around an operation, with GOMAXPROCS(1). The limit is 10 s
// and is never reached. benchmark/timeout/run.sh runs this beside weft and tokio.
//
//   - Go_WithTimeout_Ready: a value is put in a buffered channel, then
//     ctx, cancel := context.WithTimeout(background, 10s); select on the channel and
//     ctx.Done(); cancel(). Baseline Go_NoTimeout_Ready: the same send and a plain receive.
//   - Go_WithTimeout_Yield: the same with a runtime.Gosched() before the select (the
//     operation suspends once, as weft's BM_WithTimeout_Yield does). Baseline
//     Go_NoTimeout_Yield.
//   - Go_WithTimeout_TcpPingPong: a 1-byte ping-pong over 127.0.0.1 with an echo server
//     goroutine: the client writes a byte and reads it back under a context.WithTimeout,
//     which stops the read through context.AfterFunc + SetReadDeadline (how a blocking
//     net.Conn read honours a context). Baseline Go_NoTimeout_TcpPingPong: the read
//     without a limit. Go_ReadDeadline_TcpPingPong (informational): conn.SetReadDeadline
//     (now + 10s) before each read, the net package's own time limit.
//
// Each repetition of each case runs for at least -min-time seconds (the count of
// operations found once per case as Google Benchmark does: grown from 100 until a run is
// long enough; later repetitions run that count);
// the cases of a repetition run in turn, with-timeout and baseline side by side, their
// order reversed every other repetition. Prints Google Benchmark-style JSON (one entry
// per repetition and case, through internal/gbench): real_time is wall nanoseconds per
// operation, cpu_time the process's CPU nanoseconds per operation.
//
//	go run ./with_timeout [-repetitions 5] [-min-time 0.1]
package main

import (
	"context"
	"flag"
	"net"
	"runtime"
	"time"

	"weft/benchmark/go/internal/gbench"
)

// Generous: never reached, so every timer armed here is stopped before it fires.
const limit = 10 * time.Second

// A deadline in the past: makes a blocked Read return at once (what AfterFunc sets).
var longAgo = time.Unix(1, 0)

func check(ok bool, what string) {
	if !ok {
		panic(what + ": wrong result")
	}
}

func withTimeoutReady(n int64) {
	ready := make(chan int64, 1)
	for i := int64(0); i < n; i++ {
		ready <- i
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		select {
		case got := <-ready:
			check(got == i, "Go_WithTimeout_Ready")
		case <-ctx.Done():
			panic("Go_WithTimeout_Ready: timed out")
		}
		cancel()
	}
}

func noTimeoutReady(n int64) {
	ready := make(chan int64, 1)
	for i := int64(0); i < n; i++ {
		ready <- i
		check(<-ready == i, "Go_NoTimeout_Ready")
	}
}

func withTimeoutYield(n int64) {
	ready := make(chan int64, 1)
	for i := int64(0); i < n; i++ {
		ready <- i
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		runtime.Gosched()
		select {
		case got := <-ready:
			check(got == i, "Go_WithTimeout_Yield")
		case <-ctx.Done():
			panic("Go_WithTimeout_Yield: timed out")
		}
		cancel()
	}
}

func noTimeoutYield(n int64) {
	ready := make(chan int64, 1)
	for i := int64(0); i < n; i++ {
		ready <- i
		runtime.Gosched()
		check(<-ready == i, "Go_NoTimeout_Yield")
	}
}

type readLimit int

const (
	noLimit readLimit = iota
	contextTimeout
	readDeadline
)

// pingPong sends n 1-byte round trips over conn (whose peer echoes).
func pingPong(conn net.Conn, n int64, mode readLimit) {
	ping := []byte{0}
	pong := []byte{0}
	for i := int64(0); i < n; i++ {
		ping[0] = byte(i + 1)
		w, err := conn.Write(ping)
		check(err == nil && w == 1, "client write")
		var r int
		switch mode {
		case contextTimeout:
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(longAgo) })
			r, err = conn.Read(pong)
			stop()
			cancel()
		case readDeadline:
			conn.SetReadDeadline(time.Now().Add(limit))
			r, err = conn.Read(pong)
		default:
			r, err = conn.Read(pong)
		}
		check(err == nil && r == 1 && pong[0] == ping[0], "client read")
	}
	if mode == readDeadline {
		conn.SetReadDeadline(time.Time{})
	}
}

// loopback starts an echo server on 127.0.0.1 and returns a connection to it (TCP_NODELAY
// is Go's default, as it is weft's and is set on tokio's) and a function that closes it
// and waits for the server to finish.
func loopback() (net.Conn, func()) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	check(err == nil, "listen")
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := listener.Accept()
		check(err == nil, "accept")
		defer conn.Close()
		buf := make([]byte, 1)
		for {
			n, err := conn.Read(buf)
			if n == 0 || err != nil {
				return
			}
			_, err = conn.Write(buf[:n])
			check(err == nil, "echo write")
		}
	}()
	conn, err := net.Dial("tcp", listener.Addr().String())
	check(err == nil, "dial")
	return conn, func() {
		conn.Close()
		<-done
		listener.Close()
	}
}

// benchCase is one benchmark: its name, its operation (op(n) runs n of them) and, once
// found, the count of operations a repetition runs.
type benchCase struct {
	name string
	op   func(int64)
	n    int64
}

// run times one repetition: op(n) with the count found by the first repetition (grown
// from 100 until a run lasts minTime, as Google Benchmark does; that run is the first
// repetition). Returns n and the wall and CPU time it took.
func (c *benchCase) run(minTime time.Duration) (int64, time.Duration, time.Duration) {
	timed := func(n int64) (time.Duration, time.Duration) {
		start, startCPU := time.Now(), gbench.CPUTime()
		c.op(n)
		return time.Since(start), gbench.CPUTime() - startCPU
	}
	if c.n > 0 {
		wall, cpu := timed(c.n)
		return c.n, wall, cpu
	}
	n := int64(100)
	for {
		wall, cpu := timed(n)
		if wall >= minTime || n >= 1e9 {
			c.n = n
			return n, wall, cpu
		}
		// As Google Benchmark: aim 40 % past minTime, at most 10 x more at a time.
		next := int64(float64(n) * 1.4 * float64(minTime) / float64(max(wall, time.Microsecond)))
		n = min(max(next, n+1), 10*n)
	}
}

func main() {
	repetitions := flag.Int("repetitions", 5, "repetitions of each case")
	minSeconds := flag.Float64("min-time", 0.1, "seconds of each repetition of each case")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	minTime := time.Duration(*minSeconds * float64(time.Second))

	conn, closeLoopback := loopback()
	defer closeLoopback()
	// Pairs: with a limit, then without (reversed every other repetition).
	pairs := [][]*benchCase{
		{{name: "Go_WithTimeout_Ready", op: withTimeoutReady}, {name: "Go_NoTimeout_Ready", op: noTimeoutReady}},
		{{name: "Go_WithTimeout_Yield", op: withTimeoutYield}, {name: "Go_NoTimeout_Yield", op: noTimeoutYield}},
		{
			{name: "Go_WithTimeout_TcpPingPong", op: func(n int64) { pingPong(conn, n, contextTimeout) }},
			{name: "Go_NoTimeout_TcpPingPong", op: func(n int64) { pingPong(conn, n, noLimit) }},
			{name: "Go_ReadDeadline_TcpPingPong", op: func(n int64) { pingPong(conn, n, readDeadline) }},
		},
	}
	var entries []gbench.Entry
	for r := 0; r < *repetitions; r++ {
		for _, pair := range pairs {
			for k := range pair {
				c := pair[k]
				if r%2 == 1 {
					c = pair[len(pair)-1-k]
				}
				n, wall, cpu := c.run(minTime)
				entries = append(entries, gbench.Iteration(c.name, r, *repetitions, n, wall, cpu))
			}
		}
	}
	gbench.Print(entries)
}
