// Go net peer for benchmark/io: `go-peer <port>` serves on 127.0.0.1:<port> until
// SIGINT/SIGTERM, then exits 0. One goroutine per connection, as Go servers are written.
//
//	WEFT_THREADS=n       GOMAXPROCS (default 1)
//	BENCH_PROTOCOL=echo  read up to 64 KiB, write all of it back, until EOF (default)
//	BENCH_PROTOCOL=http  HTTP/1.1 keep-alive hello (hand-written, not net/http: the same
//	                     minimal work as the other peers); pipelined requests answered
//	READ_TIMEOUT_MS      echo: SetReadDeadline before each read; the connection is closed
//	                     when it passes
//	BENCH_TLS_CERT=chain.pem BENCH_TLS_KEY=key.pem
//	                     every connection is TLS (crypto/tls with its defaults: TLS 1.2
//	                     and 1.3; ALPN http/1.1 for http); the handshake runs at the
//	                     connection's first read, in its goroutine
package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

var response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello")

func echo(c net.Conn, timeout time.Duration) {
	defer c.Close()
	buf := make([]byte, 64*1024)
	for {
		if timeout > 0 {
			c.SetReadDeadline(time.Now().Add(timeout))
		}
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func serveHTTP(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 8192) // buf[:pending] is the start of a request not complete yet
	out := make([]byte, 0, 4096)
	sep := []byte("\r\n\r\n")
	pending := 0
	for pending < len(buf) { // a request header past 8 KiB closes the connection
		n, err := c.Read(buf[pending:])
		data := buf[:pending+n]
		for {
			i := bytes.Index(data, sep)
			if i < 0 {
				break
			}
			out = append(out, response...)
			data = data[i+4:]
		}
		pending = copy(buf, data)
		if len(out) > 0 {
			if _, werr := c.Write(out); werr != nil {
				return
			}
			out = out[:0]
		}
		if err != nil {
			return
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-peer <port>")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(max(1, envInt("WEFT_THREADS", 1)))
	isHTTP := os.Getenv("BENCH_PROTOCOL") == "http"
	timeout := time.Duration(envInt("READ_TIMEOUT_MS", 0)) * time.Millisecond

	ln, err := net.Listen("tcp4", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if certFile, keyFile := os.Getenv("BENCH_TLS_CERT"), os.Getenv("BENCH_TLS_KEY"); certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "BENCH_TLS_CERT/BENCH_TLS_KEY:", err)
			os.Exit(1)
		}
		config := &tls.Config{Certificates: []tls.Certificate{cert}}
		if isHTTP {
			config.NextProtos = []string{"http/1.1"}
		}
		ln = tls.NewListener(ln, config)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if isHTTP {
				go serveHTTP(c)
			} else {
				go echo(c, timeout)
			}
		}
	}()
	<-stop
	ln.Close()
}
