//! tokio peer for benchmark/io: `tokio-peer <port>` serves on 127.0.0.1:<port> until
//! SIGINT/SIGTERM. WEFT_THREADS (default 1): 1 -> current_thread runtime, n -> multi-thread
//! with n workers. BENCH_PROTOCOL=echo|http (default echo). READ_TIMEOUT_MS bounds each
//! echo read (tokio::time::timeout); the connection is closed when it expires.
//! BENCH_TLS_CERT=chain.pem BENCH_TLS_KEY=key.pem: every connection is TLS, the handshake
//! in the connection's own task, ALPN http/1.1 for http. Built with the default feature
//! `rustls`: tokio-rustls, rustls's defaults on the ring provider (TLS 1.2 and 1.3). Built
//! with `--no-default-features --features openssl`: tokio-openssl on the system's OpenSSL,
//! configured the way the openssl crate recommends for servers
//! (SslAcceptor::mozilla_intermediate_v5: TLS 1.2 and 1.3, OpenSSL's session tickets).

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

#[cfg(all(feature = "rustls", feature = "openssl"))]
compile_error!("features `rustls` and `openssl` are two TLS stacks: build with one of them");
#[cfg(not(any(feature = "rustls", feature = "openssl")))]
compile_error!("a TLS stack is needed: feature `rustls` (the default) or `openssl`");

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, timeout: Option<Duration>) {
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
            Ok(0) => {
                let _ = s.shutdown().await; // TLS: answers the client's close_notify
                return;
            }
            Err(_) => return,
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

async fn http<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
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

// TLS by tokio-rustls.
#[cfg(feature = "rustls")]
mod tls {
    use std::sync::Arc;
    use tokio::net::TcpStream;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    pub type Acceptor = tokio_rustls::TlsAcceptor;

    pub fn acceptor(cert: &str, key: &str, is_http: bool) -> Acceptor {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect())
            .unwrap_or_else(|e| panic!("BENCH_TLS_CERT {cert}: {e}"));
        let key = PrivateKeyDer::from_pem_file(key)
            .unwrap_or_else(|e| panic!("BENCH_TLS_KEY {key}: {e}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("certificate and key");
        if is_http {
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
        }
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    pub async fn accept(
        acceptor: &Acceptor,
        s: TcpStream,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        acceptor.accept(s).await.ok()
    }
}

// TLS by tokio-openssl.
#[cfg(feature = "openssl")]
mod tls {
    use openssl::ssl::{select_next_proto, AlpnError, Ssl, SslAcceptor, SslFiletype, SslMethod};
    use std::pin::Pin;
    use std::sync::Arc;
    use tokio::net::TcpStream;

    pub type Acceptor = Arc<SslAcceptor>;

    pub fn acceptor(cert: &str, key: &str, is_http: bool) -> Acceptor {
        let mut builder =
            SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).expect("SSL_CTX");
        builder
            .set_certificate_chain_file(cert)
            .unwrap_or_else(|e| panic!("BENCH_TLS_CERT {cert}: {e}"));
        builder
            .set_private_key_file(key, SslFiletype::PEM)
            .unwrap_or_else(|e| panic!("BENCH_TLS_KEY {key}: {e}"));
        builder
            .check_private_key()
            .expect("the key does not match the certificate");
        if is_http {
            builder.set_alpn_select_callback(|_, client| {
                select_next_proto(b"\x08http/1.1", client).ok_or(AlpnError::NOACK)
            });
        }
        Arc::new(builder.build())
    }

    pub async fn accept(
        acceptor: &Acceptor,
        s: TcpStream,
    ) -> Option<tokio_openssl::SslStream<TcpStream>> {
        let ssl = Ssl::new(acceptor.context()).ok()?;
        let mut stream = tokio_openssl::SslStream::new(ssl, s).ok()?;
        Pin::new(&mut stream).accept().await.ok()?;
        Some(stream)
    }
}

// The TLS acceptor when BENCH_TLS_CERT and BENCH_TLS_KEY name a chain and its key.
fn tls_acceptor(is_http: bool) -> Option<tls::Acceptor> {
    match (
        std::env::var("BENCH_TLS_CERT"),
        std::env::var("BENCH_TLS_KEY"),
    ) {
        (Ok(cert), Ok(key)) => Some(tls::acceptor(&cert, &key, is_http)),
        _ => None,
    }
}

async fn serve(port: u16) {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let is_http = std::env::var("BENCH_PROTOCOL")
        .map(|p| p == "http")
        .unwrap_or(false);
    let tls = tls_acceptor(is_http);
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
                match (&tls, is_http) {
                    (None, true) => { tokio::spawn(http(s)); }
                    (None, false) => { tokio::spawn(echo(s, timeout)); }
                    (Some(acceptor), _) => {
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            let Some(s) = tls::accept(&acceptor, s).await else { return };
                            if is_http { http(s).await } else { echo(s, timeout).await }
                        });
                    }
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
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
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
