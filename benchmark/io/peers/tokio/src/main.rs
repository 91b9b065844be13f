//! tokio peer for benchmark/io: `tokio-peer <port>` serves on 127.0.0.1:<port> until
//! SIGINT/SIGTERM. WEFT_THREADS (default 1): 1 -> current_thread runtime, n -> multi-thread
//! with n workers. BENCH_PROTOCOL=echo|http (default echo). READ_TIMEOUT_MS bounds each
//! echo read (tokio::time::timeout); the connection is closed when it expires.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn echo(mut s: TcpStream, timeout: Option<Duration>) {
    // read_buf fills the spare capacity: an idle connection's 64 KiB are never touched.
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        let n = match timeout {
            Some(t) => match tokio::time::timeout(t, s.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => return, // deadline passed: close
            },
            None => s.read_buf(&mut buf).await,
        };
        match n {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn find_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

async fn http(mut s: TcpStream) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut out = Vec::with_capacity(4096);
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        // Answer every complete request in the buffer (pipelining), in one write.
        let mut start = 0;
        while let Some(end) = find_end(&buf[start..]) {
            out.extend_from_slice(RESPONSE);
            start += end;
        }
        buf.drain(..start);
        if !out.is_empty() {
            if s.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}

async fn serve(port: u16) {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let is_http = std::env::var("BENCH_PROTOCOL").map(|p| p == "http").unwrap_or(false);
    let timeout = std::env::var("READ_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT");
    loop {
        tokio::select! {
            r = listener.accept() => {
                let Ok((s, _)) = r else { continue };
                let _ = s.set_nodelay(true);
                if is_http {
                    tokio::spawn(http(s));
                } else {
                    tokio::spawn(echo(s, timeout));
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
}

fn main() {
    let port: u16 = match std::env::args().nth(1).and_then(|p| p.parse().ok()) {
        Some(p) => p,
        None => {
            eprintln!("usage: tokio-peer <port>");
            std::process::exit(2);
        }
    };
    let threads = env_or("WEFT_THREADS", 1).max(1) as usize;
    let rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .expect("runtime");
    rt.block_on(serve(port));
    // Connections still open are dropped with the runtime; exit 0.
    rt.shutdown_timeout(Duration::from_millis(100));
}
