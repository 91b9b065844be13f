// loadgen: the bounded TCP load generator of benchmark/io/run.sh and benchmark/tls/run.sh.
// It talks only to the address it is given (127.0.0.1 in the scripts), stops by itself
// after -warmup + -duration, and prints one JSON line.
//
//	loadgen -mode pingpong -addr 127.0.0.1:9000 -conns 100 -size 64 -duration 5s -warmup 1s
//	    each connection sends -size bytes and waits for the whole echo before the next;
//	    round trips and their latency (log-linear histogram, 1/64 relative precision)
//	    are counted in the measured window only
//	loadgen -mode stream -conns 4 -window 262144 ...
//	    each connection writes 64 KiB chunks and reads with a 64 KiB buffer, continuously,
//	    with at most -window bytes not yet echoed (0: no bound); bytes echoed back per second
//	loadgen -mode idle -conns 10000 -duration 5s ...
//	    opens the connections, sends -size bytes on each and reads the echo, then keeps
//	    them idle for -duration; reports how many the server kept open
//	loadgen -mode connect -conns 50 -size 64 ...
//	    short connections: each of -conns clients connects, sends -size bytes, waits for
//	    the whole echo and closes, again and again; requests are connections served, and
//	    their latency runs from the dial to the echo's last byte
//
// -tls: every connection speaks TLS 1.3 (crypto/tls) from its dial on, with X25519 as its
// only key exchange group and no session cache, so that each connection makes a full
// handshake (in -mode connect: one handshake per request). The server's certificate is
// not verified: benchmark/tls/run.sh makes a self-signed one for each run.
// -resume (with -tls): a session cache, so that each new connection offers a session
// ticket the server sent to an earlier one (a resumed TLS 1.3 handshake: PSK with a new
// X25519 exchange, no certificate, no signature); in -mode connect each client has its
// own cache, so its next connection offers the ticket its last one received. In -mode
// connect the result's "resumed" counts the measured connections that did resume: a
// server that sends no ticket, or refuses it, makes full handshakes, and the report says
// so.
// -http (with -mode connect or idle): the message is an HTTP/1.1 GET and the answer one
// HTTP response (any headers, its Content-Length body), in place of -size bytes echoed.
//
// -pids 12,34: the server's processes. Their CPU time (utime+stime from /proc/<pid>/stat)
// is read at the start and the end of the measured window (and the load generator's own,
// as client_cpu_s), and their VmRSS (idle mode: before the connections are opened and
// once they all are idle).
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---- latency histogram: values below 64 ns exact, then 64 buckets per power of two ----

const subBuckets = 64

type histogram struct {
	counts [64 * subBuckets]atomic.Uint64
}

func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	shift := bits.Len64(ns) - 7 // keep the top 7 bits: 64..127
	return (shift+1)*subBuckets + int(ns>>shift) - subBuckets
}

func bucketValue(i int) float64 { // the middle of bucket i, in ns
	if i < subBuckets {
		return float64(i)
	}
	shift := i/subBuckets - 1
	low := uint64(i%subBuckets+subBuckets) << shift
	return float64(low) + float64(uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) { h.counts[bucketOf(uint64(d))].Add(1) }

func (h *histogram) quantile(q float64) float64 {
	var total uint64
	for i := range h.counts {
		total += h.counts[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return bucketValue(i)
		}
	}
	return 0
}

// ---- the server's processes, from /proc ----

func cpuSeconds(pids []int) float64 {
	var ticks float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): utime and stime are the
		// 14th and 15th fields of the line, the 12th and 13th after ") ".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		ticks += u + s
	}
	return ticks / 100 // USER_HZ is 100 on Linux
}

func rssKiB(pids []int) int64 {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				v, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
				total += v
			}
		}
	}
	return total
}

func alive(pids []int) bool {
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return false
		}
	}
	return true
}

// ---- the modes ----

type result struct {
	Mode         string  `json:"mode"`
	Conns        int     `json:"conns"`
	Size         int     `json:"size"`
	Seconds      float64 `json:"seconds"`
	Requests     uint64  `json:"requests,omitempty"`
	RPS          float64 `json:"rps,omitempty"`
	P50us        float64 `json:"p50_us,omitempty"`
	P99us        float64 `json:"p99_us,omitempty"`
	Bytes        uint64  `json:"bytes,omitempty"`
	MBps         float64 `json:"mb_per_s,omitempty"`
	ServerCPU    float64 `json:"server_cpu_s"`
	ClientCPU    float64 `json:"client_cpu_s"`
	RSSBeforeKiB int64   `json:"rss_before_kib,omitempty"`
	RSSIdleKiB   int64   `json:"rss_idle_kib,omitempty"`
	StillOpen    int     `json:"still_open"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	ServerAlive  bool    `json:"server_alive"`
	TLS          string  `json:"tls,omitempty"`
	Resumed      *uint64 `json:"resumed,omitempty"` // -resume: measured connections that resumed
}

var (
	measuring atomic.Bool // inside the measured window
	stopped   atomic.Bool // past it
	errCount  atomic.Int64
	firstErr  atomic.Value
)

func fail(err error) {
	if errCount.Add(1) == 1 {
		firstErr.Store(err.Error())
	}
}

// ---- dialing, and one request and its answer ----

var (
	tlsConfig     *tls.Config   // nil: plain TCP
	httpExchanges bool          // -http
	negotiated    atomic.Value  // the first TLS connection's version and cipher suite
	resumed       atomic.Uint64 // -mode connect: measured connections that resumed a session
	httpRequest   = []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
)

// dial connects to addr and, with -tls, completes the handshake before it returns.
func dial(addr string) (net.Conn, error) { return dialWith(addr, tlsConfig) }

// dialWith is dial with this TLS configuration (nil: plain TCP).
func dialWith(addr string, config *tls.Config) (net.Conn, error) {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil || config == nil {
		return c, err
	}
	t := tls.Client(c, config)
	t.SetDeadline(time.Now().Add(5 * time.Second))
	if err := t.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	t.SetDeadline(time.Time{})
	if negotiated.Load() == nil {
		st := t.ConnectionState()
		negotiated.Store(tls.VersionName(st.Version) + " " + tls.CipherSuiteName(st.CipherSuite))
	}
	return t, nil
}

// exchange sends out and reads its whole echo into in, or with -http sends a GET and
// reads the whole response (a status other than 200 is an error).
func exchange(c net.Conn, out, in []byte) error {
	if !httpExchanges {
		if _, err := c.Write(out); err != nil {
			return err
		}
		_, err := io.ReadFull(c, in)
		return err
	}
	if _, err := c.Write(httpRequest); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	return nil
}

func dialAll(addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		var c net.Conn
		var err error
		for try := 0; try < 50; try++ { // the listen backlog may be full for a moment
			if c, err = dial(addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// window runs warm-up then the measured window, reading the server's CPU around it.
func window(warmup, duration time.Duration, pids []int, r *result) {
	time.Sleep(warmup)
	self := []int{os.Getpid()}
	cpu0, own0 := cpuSeconds(pids), cpuSeconds(self)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(duration)
	measuring.Store(false)
	stopped.Store(true)
	r.Seconds = time.Since(t0).Seconds()
	r.ServerCPU = cpuSeconds(pids) - cpu0
	r.ClientCPU = cpuSeconds(self) - own0
}

func pingpong(conns []net.Conn, size int, warmup, duration time.Duration, pids []int, r *result) {
	var h histogram
	var total atomic.Uint64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			out := make([]byte, size)
			in := make([]byte, size)
			var n uint64
			for !stopped.Load() {
				t := time.Now()
				_, err := c.Write(out)
				if err == nil {
					_, err = io.ReadFull(c, in)
				}
				if err != nil {
					if !stopped.Load() {
						fail(err)
					}
					break
				}
				if measuring.Load() {
					h.record(time.Since(t))
					n++
				}
			}
			total.Add(n)
		}(c)
	}
	window(warmup, duration, pids, r)
	for _, c := range conns { // unblocks whoever still waits for an echo
		c.SetDeadline(time.Now())
	}
	wg.Wait()
	r.Requests = total.Load()
	r.RPS = float64(r.Requests) / r.Seconds
	r.P50us = h.quantile(0.50) / 1e3
	r.P99us = h.quantile(0.99) / 1e3
}

// stream: each connection writes 64 KiB chunks and reads its echo with a 64 KiB buffer,
// both continuously, with at most `inFlight` bytes sent and not yet echoed back (0: no
// bound). The window is what an application-level flow control (HTTP/2, a proxy's
// buffer) gives a real stream; without it the bytes in flight grow until the kernel's
// socket buffers stop them (tens of MB with receive-buffer autotuning), so that every
// copy misses the caches and TCP's loss probes fire whenever a side is descheduled,
// which makes the server's CPU per MB vary by tens of percent from run to run.
func stream(conns []net.Conn, inFlight int, warmup, duration time.Duration, pids []int, r *result) {
	const chunk = 64 * 1024
	var total atomic.Uint64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(2)
		// credit: one token per chunk the window allows in flight; the writer takes one
		// per chunk written, the reader gives one back per chunk echoed.
		var credit chan struct{}
		if inFlight > 0 {
			credit = make(chan struct{}, (inFlight+chunk-1)/chunk)
			for i := 0; i < cap(credit); i++ {
				credit <- struct{}{}
			}
		}
		done := make(chan struct{})
		go func(c net.Conn) {
			defer wg.Done()
			out := make([]byte, chunk)
			for !stopped.Load() {
				if credit != nil {
					select {
					case <-credit:
					case <-done:
						return
					}
				}
				if _, err := c.Write(out); err != nil {
					if !stopped.Load() {
						fail(err)
					}
					return
				}
			}
		}(c)
		go func(c net.Conn) {
			defer wg.Done()
			defer close(done)
			in := make([]byte, chunk)
			var n, echoed uint64
			for !stopped.Load() {
				k, err := c.Read(in)
				if measuring.Load() {
					n += uint64(k)
				}
				if credit != nil {
					for echoed += uint64(k); echoed >= chunk; echoed -= chunk {
						credit <- struct{}{}
					}
				}
				if err != nil {
					if !stopped.Load() {
						fail(err)
					}
					break
				}
			}
			total.Add(n)
		}(c)
	}
	window(warmup, duration, pids, r)
	for _, c := range conns {
		c.SetDeadline(time.Now())
	}
	wg.Wait()
	r.Bytes = total.Load()
	r.MBps = float64(r.Bytes) / r.Seconds / 1e6
}

func connect(addr string, clients, size int, warmup, duration time.Duration, pids []int, r *result) {
	var h histogram
	var total atomic.Uint64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]byte, size)
			in := make([]byte, size)
			// -resume: each client its own session cache, as a client process has: its
			// next connection offers the ticket its last one received (a server may take
			// each ticket once: rustls does).
			config := tlsConfig
			if config != nil && config.ClientSessionCache != nil {
				config = tlsConfig.Clone()
				config.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			}
			var n uint64
			for !stopped.Load() {
				t := time.Now()
				c, err := dialWith(addr, config)
				didResume := false
				if err == nil {
					c.SetDeadline(time.Now().Add(5 * time.Second))
					err = exchange(c, out, in)
					if t, ok := c.(*tls.Conn); ok {
						didResume = t.ConnectionState().DidResume
					}
					c.Close()
				}
				if err != nil {
					if !stopped.Load() {
						fail(err)
					}
					continue // a full backlog or a reset: the next connection tries again
				}
				if measuring.Load() {
					h.record(time.Since(t))
					n++
					if didResume {
						resumed.Add(1)
					}
				}
			}
			total.Add(n)
		}()
	}
	window(warmup, duration, pids, r)
	wg.Wait()
	r.Requests = total.Load()
	r.RPS = float64(r.Requests) / r.Seconds
	r.P50us = h.quantile(0.50) / 1e3
	r.P99us = h.quantile(0.99) / 1e3
}

func idle(addr string, n, size int, duration time.Duration, pids []int, r *result) {
	r.RSSBeforeKiB = rssKiB(pids)
	conns, err := dialAll(addr, n)
	if err != nil {
		fail(err)
		return
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	msg := make([]byte, size)
	in := make([]byte, size)
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := exchange(c, msg, in); err != nil {
			fail(err)
		}
		c.SetDeadline(time.Time{})
	}
	// One blocked read per connection notices a close by the server; nothing is sent.
	var closed atomic.Int64
	for _, c := range conns {
		go func(c net.Conn) {
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !stopped.Load() {
				closed.Add(1)
			}
		}(c)
	}
	time.Sleep(500 * time.Millisecond) // let the server settle before its RSS is read
	r.RSSIdleKiB = rssKiB(pids)
	cpu0 := cpuSeconds(pids)
	t0 := time.Now()
	time.Sleep(duration)
	r.Seconds = time.Since(t0).Seconds()
	r.ServerCPU = cpuSeconds(pids) - cpu0
	stopped.Store(true)
	r.StillOpen = len(conns) - int(closed.Load())
}

func main() {
	mode := flag.String("mode", "pingpong", "pingpong, stream, idle or connect")
	addr := flag.String("addr", "127.0.0.1:9000", "server address")
	nconns := flag.Int("conns", 1, "connections")
	size := flag.Int("size", 64, "message size in bytes (pingpong, idle, connect)")
	duration := flag.Duration("duration", 5*time.Second, "measured window (idle: idle time)")
	warmup := flag.Duration("warmup", time.Second, "warm-up before the measured window")
	streamWindow := flag.Int("window", 0, "stream: bytes in flight per connection at most (0: no bound)")
	pidList := flag.String("pids", "", "comma-separated pids of the server's processes")
	useTLS := flag.Bool("tls", false, "TLS 1.3 on every connection (the certificate is not verified)")
	flag.BoolVar(&httpExchanges, "http", false, "connect, idle: an HTTP GET and its response")
	resume := flag.Bool("resume", false, "with -tls: resume sessions (one cache for all connections)")
	flag.Parse()
	if *useTLS {
		tlsConfig = &tls.Config{
			// The benchmark's servers present a self-signed certificate made for the run, on
			// 127.0.0.1: what is measured is their cost, not the certificate's authority.
			InsecureSkipVerify: true,
			MinVersion:         tls.VersionTLS13,
			// One key exchange for every server (Go would offer a post-quantum hybrid first).
			CurvePreferences: []tls.CurveID{tls.X25519},
			// No ClientSessionCache: no resumption, every connection a full handshake.
		}
		if *resume {
			// Keyed by the server's address (-mode connect: one per client, see there).
			tlsConfig.ClientSessionCache = tls.NewLRUClientSessionCache(64)
		}
	} else if *resume {
		fmt.Fprintln(os.Stderr, "loadgen: -resume goes with -tls")
		os.Exit(2)
	}
	if httpExchanges && *mode != "connect" && *mode != "idle" {
		fmt.Fprintln(os.Stderr, "loadgen: -http goes with -mode connect or idle")
		os.Exit(2)
	}

	var pids []int
	for _, p := range strings.Split(*pidList, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
			pids = append(pids, v)
		}
	}
	r := result{Mode: *mode, Conns: *nconns, Size: *size}
	switch *mode {
	case "pingpong", "stream":
		conns, err := dialAll(*addr, *nconns)
		if err != nil {
			fail(err)
			break
		}
		if *mode == "pingpong" {
			pingpong(conns, *size, *warmup, *duration, pids, &r)
		} else {
			stream(conns, *streamWindow, *warmup, *duration, pids, &r)
		}
		for _, c := range conns {
			c.Close()
		}
		r.StillOpen = len(conns) - int(errCount.Load())
	case "connect":
		connect(*addr, *nconns, *size, *warmup, *duration, pids, &r)
	case "idle":
		idle(*addr, *nconns, *size, *duration, pids, &r)
	default:
		fail(errors.New("unknown -mode " + *mode))
	}
	r.Errors = errCount.Load()
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	r.ServerAlive = len(pids) == 0 || alive(pids)
	if v, ok := negotiated.Load().(string); ok {
		r.TLS = v
	}
	if *resume {
		n := resumed.Load()
		r.Resumed = &n
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	if r.Errors > 0 && r.Requests == 0 && r.Bytes == 0 && r.StillOpen == 0 {
		os.Exit(1)
	}
}
