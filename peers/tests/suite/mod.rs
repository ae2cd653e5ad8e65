//! Shared pieces: start the real `rig-peer`, the expected responses, and
//! hyper clients for each protocol rig drives.

mod endpoints;
mod http3;
mod live;
mod shutdown;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// (path, status, content-type, body) for every route, plus one 404.
pub fn expected() -> Vec<(&'static str, u16, &'static str, Vec<u8>)> {
    vec![
        ("/plain", 200, "text/plain", b"hello".to_vec()),
        (
            "/json",
            200,
            "application/json",
            br#"{"message":"hello","id":1}"#.to_vec(),
        ),
        (
            "/bytes",
            200,
            "application/octet-stream",
            (0..65536usize).map(|i| (i % 251) as u8).collect(),
        ),
        ("/no/such/path", 404, "text/plain", b"not found".to_vec()),
    ]
}

pub fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tls")
}

/// A running `rig-peer` we spawned; killed on drop if a test left it running.
pub struct Peer {
    child: Child,
    pub port: u16,
}

impl Peer {
    pub fn start(extra: &[&str]) -> Peer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rig-peer"))
            .args(["--port", "0", "--workers", "2"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning rig-peer");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("reading rig-peer's stdout");
        let Some(port) = line.strip_prefix("READY port=") else {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("rig-peer {extra:?} printed {line:?} instead of READY; stderr: {err}");
        };
        let port = port.trim_end().parse().expect("READY port is a number");
        Peer { child, port }
    }

    pub fn start_tls() -> Peer {
        Peer::start_tls_with(&[])
    }

    /// `--tls` with the fixture certificate, plus `extra`.
    pub fn start_tls_with(extra: &[&str]) -> Peer {
        let dir = tls_dir();
        let cert = dir.join("localhost.pem");
        let key = dir.join("localhost.key");
        let mut args = vec![
            "--tls",
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Peer::start(&args)
    }

    /// Sends `sig` to this child only.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
    }

    /// Waits for exit; panics (after killing it) if `limit` passes first, so
    /// a hung shutdown fails the test instead of hanging it.
    pub fn wait(&mut self, limit: Duration) -> (ExitStatus, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let mut err = String::new();
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
                return (status, err);
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("rig-peer still running {limit:?} after the signal");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A response with its body read in full.
pub struct Got {
    pub version: Version,
    pub status: u16,
    pub content_type: String,
    pub connection: Option<String>,
    pub body: Bytes,
}

pub async fn read(response: Response<hyper::body::Incoming>) -> Got {
    let (parts, body) = response.into_parts();
    let header = |name| {
        parts
            .headers
            .get(name)
            .map(|v: &hyper::header::HeaderValue| v.to_str().unwrap().to_owned())
    };
    Got {
        version: parts.version,
        status: parts.status.as_u16(),
        content_type: header(hyper::header::CONTENT_TYPE).unwrap_or_default(),
        connection: header(hyper::header::CONNECTION),
        body: body.collect().await.expect("reading the body").to_bytes(),
    }
}

pub fn get(path: &str, version: Version) -> Request<Empty<Bytes>> {
    let mut req = Request::get(path);
    // h2 wants an absolute URI (:scheme, :authority); h1 wants origin-form
    // plus Host.
    if version == Version::HTTP_2 {
        req = Request::get(format!("http://localhost{path}"));
    } else {
        req = req.header(hyper::header::HOST, "localhost");
    }
    req.version(version).body(Empty::new()).unwrap()
}

pub async fn tcp(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting to rig-peer")
}

/// A TLS connection that verifies rig-peer against the fixture CA under
/// the name `name`, offering `alpn`.
pub async fn tls(port: u16, name: &str, alpn: &[&[u8]]) -> std::io::Result<TlsStream<TcpStream>> {
    let roots = fixture_roots();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp(port).await)
        .await
}

pub type Body = Empty<Bytes>;

pub async fn h1<S>(io: S) -> http1::SendRequest<Body>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .expect("h1 handshake");
    tokio::spawn(conn);
    sender
}

pub async fn h2<S>(io: S) -> http2::SendRequest<Body>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(io))
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

/// The fixture CA, the only root a test client trusts.
pub fn fixture_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(tls_dir().join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    roots
}
