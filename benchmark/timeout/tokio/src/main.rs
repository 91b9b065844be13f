//! tokio's side of benchmark/timeout/run.sh (issue #29, item 3): what
//! `tokio::time::timeout` costs around an operation, on a current_thread runtime (timers
//! and I/O enabled). The limit is 10 s and is never reached. The counterpart of
//! benchmark/coro/with_timeout_benchmark.cc and benchmark/go/with_timeout.
//!
//!  - Tokio_Timeout_Ready: `timeout(10s, ready(i)).await`, where `ready` is an async fn
//!    that returns at once. Baseline Tokio_NoTimeout_Ready: `ready(i).await`.
//!  - Tokio_Timeout_Yield: the same with an async fn that first yields once
//!    (`tokio::task::yield_now()`), so that the timer is registered and then dropped.
//!    Baseline Tokio_NoTimeout_Yield.
//!  - Tokio_Timeout_TcpPingPong: a 1-byte ping-pong over 127.0.0.1 (TCP_NODELAY) with an
//!    echo server task on the same runtime: the client writes a byte and reads it back
//!    with `timeout(10s, stream.read(..))`. Baseline Tokio_NoTimeout_TcpPingPong.
//!
//! Usage: `tokio-timeout [repetitions] [min-seconds]` (defaults 5 and 0.1). Each repetition
//! of each case runs for at least min-seconds (the count of operations found once per case
//! as Google Benchmark does: grown from 100 until a run is long enough); the cases of a repetition run in turn, with-timeout and
//! baseline side by side, their order reversed every other repetition. Prints Google
//! Benchmark-style JSON: real_time is wall nanoseconds per operation, cpu_time the
//! process's CPU nanoseconds per operation.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Generous: never reached, so every timer registered here is dropped before it fires.
const LIMIT: Duration = Duration::from_secs(10);

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("{what}: wrong result");
        std::process::abort();
    }
}

/// The process's CPU time (user + system), as benchmark/go/internal/gbench.CPUTime.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    check(rc == 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[inline(never)]
async fn ready(v: u64) -> u64 {
    black_box(v)
}

#[inline(never)]
async fn after_yield(v: u64) -> u64 {
    tokio::task::yield_now().await;
    black_box(v)
}

async fn timeout_ready(n: u64) {
    for i in 0..n {
        check(
            timeout(LIMIT, ready(i)).await == Ok(i),
            "Tokio_Timeout_Ready",
        );
    }
}

async fn no_timeout_ready(n: u64) {
    for i in 0..n {
        check(ready(i).await == i, "Tokio_NoTimeout_Ready");
    }
}

async fn timeout_yield(n: u64) {
    for i in 0..n {
        check(
            timeout(LIMIT, after_yield(i)).await == Ok(i),
            "Tokio_Timeout_Yield",
        );
    }
}

async fn no_timeout_yield(n: u64) {
    for i in 0..n {
        check(after_yield(i).await == i, "Tokio_NoTimeout_Yield");
    }
}

/// n 1-byte round trips over `stream` (whose peer echoes), each read under the limit or not.
async fn ping_pong(stream: &mut TcpStream, n: u64, with_timeout: bool) {
    let mut ping = [0u8; 1];
    let mut pong = [0u8; 1];
    for i in 0..n {
        ping[0] = (i as u8).wrapping_add(1);
        check(stream.write(&ping).await.ok() == Some(1), "client write");
        let r = if with_timeout {
            match timeout(LIMIT, stream.read(&mut pong)).await {
                Ok(r) => r,
                Err(_) => {
                    check(false, "Tokio_Timeout_TcpPingPong: timed out");
                    unreachable!()
                }
            }
        } else {
            stream.read(&mut pong).await
        };
        check(r.ok() == Some(1) && pong[0] == ping[0], "client read");
    }
}

async fn echo(mut stream: TcpStream) {
    let mut buf = [0u8; 1];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => check(stream.write(&buf[..n]).await.ok() == Some(n), "echo write"),
        }
    }
}

type Op<'a> = Box<dyn FnMut(u64) -> Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>;

/// One repetition of one case: op(n) with the count the case's first repetition found
/// (`*count`, 0 until then: grown from 100 until a run lasts min_time, as Google Benchmark
/// does; that run is the first repetition). Returns (n, wall, cpu). The boxed future is
/// one allocation per run, not per operation.
async fn measure(
    op: &mut Op<'_>,
    count: &mut u64,
    min_time: Duration,
) -> (u64, Duration, Duration) {
    let mut n: u64 = if *count > 0 { *count } else { 100 };
    loop {
        let (start, start_cpu) = (Instant::now(), cpu_time());
        op(n).await;
        let (wall, cpu) = (start.elapsed(), cpu_time() - start_cpu);
        if *count > 0 || wall >= min_time || n >= 1_000_000_000 {
            *count = n;
            return (n, wall, cpu);
        }
        // As Google Benchmark: aim 40 % past min_time, at most 10 x more at a time.
        let wall_s = wall.as_secs_f64().max(1e-6);
        let next = (n as f64 * 1.4 * min_time.as_secs_f64() / wall_s) as u64;
        n = next.max(n + 1).min(10 * n);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let repetitions: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let min_seconds: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.1);
    let min_time = Duration::from_secs_f64(min_seconds);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let entries = runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local_addr");
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            stream.set_nodelay(true).expect("nodelay");
            echo(stream).await;
        });
        let client = std::cell::RefCell::new(TcpStream::connect(address).await.expect("connect"));
        client.borrow().set_nodelay(true).expect("nodelay");
        let client = &client;

        // Groups: with a limit, then without (reversed every other repetition).
        let mut groups: Vec<Vec<(&str, Op<'_>, u64)>> = vec![
            vec![
                ("Tokio_Timeout_Ready", Box::new(|n| Box::pin(timeout_ready(n)) as _), 0),
                ("Tokio_NoTimeout_Ready", Box::new(|n| Box::pin(no_timeout_ready(n)) as _), 0),
            ],
            vec![
                ("Tokio_Timeout_Yield", Box::new(|n| Box::pin(timeout_yield(n)) as _), 0),
                ("Tokio_NoTimeout_Yield", Box::new(|n| Box::pin(no_timeout_yield(n)) as _), 0),
            ],
            vec![
                (
                    "Tokio_Timeout_TcpPingPong",
                    Box::new(move |n| {
                        Box::pin(async move { ping_pong(&mut client.borrow_mut(), n, true).await })
                            as _
                    }),
                    0,
                ),
                (
                    "Tokio_NoTimeout_TcpPingPong",
                    Box::new(move |n| {
                        Box::pin(async move { ping_pong(&mut client.borrow_mut(), n, false).await })
                            as _
                    }),
                    0,
                ),
            ],
        ];
        let mut entries = Vec::new();
        for r in 0..repetitions {
            for group in groups.iter_mut() {
                let len = group.len();
                for k in 0..len {
                    let index = if r % 2 == 1 { len - 1 - k } else { k };
                    let (name, op, count) = &mut group[index];
                    let (n, wall, cpu) = measure(op, count, min_time).await;
                    entries.push(format!(
                        "    {{\"name\": \"{name}\", \"run_name\": \"{name}\", \"run_type\": \"iteration\", \
                         \"repetition_index\": {r}, \"repetitions\": {repetitions}, \"iterations\": {n}, \
                         \"real_time\": {:.3}, \"cpu_time\": {:.3}, \"time_unit\": \"ns\"}}",
                        wall.as_nanos() as f64 / n as f64,
                        cpu.as_nanos() as f64 / n as f64
                    ));
                }
            }
        }
        drop(groups);
        // Closing the client's stream ends the echo server (it reads the end of the stream).
        client.borrow_mut().shutdown().await.expect("shutdown");
        server.await.expect("echo server");
        entries
    });
    println!("{{\n  \"benchmarks\": [\n{}\n  ]\n}}", entries.join(",\n"));
}
