//! The small blocking fixed-count HTTP/1.1 client behind `rig attach
//! --drive`.
//!
//! In: a loopback URL, a connection count and an exact request count. Out: a
//! `LoadResult` (successes, errors by kind). One OS thread per connection and
//! no runtime: between requests nothing of rig's runs, which keeps the
//! attribution window's quiesce simple. Connections are opened (and warmed)
//! before the window, so the window contains exactly the N requests and
//! nothing of connection setup. Throughput work uses `Client` instead.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::Serialize;

use super::LoadError;

/// An HTTP/1.1 endpoint on loopback.
#[derive(Clone, Debug, Serialize)]
pub struct H1Target {
    pub url: String,
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

impl H1Target {
    /// Parse `http://HOST:PORT/PATH`; only loopback addresses are accepted
    /// (`load::url`, the one parser of `--drive`'s URLs).
    pub fn parse(url: &str) -> Result<H1Target, LoadError> {
        let u = super::url::Url::parse(url)?;
        if u.tls {
            return Err(LoadError::BadUrl {
                url: url.to_string(),
                why: "only http:// URLs are supported here".to_string(),
            });
        }
        // The Host header: the authority as written, brackets kept for IPv6.
        let host = match u.host.contains(':') {
            true => format!("[{}]:{}", u.host, u.addr.port()),
            false => format!("{}:{}", u.host, u.addr.port()),
        };
        Ok(H1Target {
            url: u.url,
            addr: u.addr,
            host,
            path: u.path,
        })
    }
}

/// Outcome of a batch of requests.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LoadResult {
    pub sent: u64,
    pub succeeded: u64,
    /// Failed requests by kind (`status 500`, `io: connection reset`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Requests never handed to a socket, by why (see
    /// `LoadReport::not_sent`): not in `sent`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub not_sent: BTreeMap<String, u64>,
}

impl LoadResult {
    fn merge(&mut self, o: LoadResult) {
        self.sent += o.sent;
        self.succeeded += o.succeeded;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        for (k, v) in o.not_sent {
            *self.not_sent.entry(k).or_default() += v;
        }
    }
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// One keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    request: Vec<u8>,
    buf: Vec<u8>,
    broken: bool,
}

impl Conn {
    pub fn open(target: &H1Target) -> Result<Conn, LoadError> {
        let stream =
            TcpStream::connect_timeout(&target.addr, Duration::from_secs(5)).map_err(|source| {
                LoadError::Connect {
                    addr: target.addr,
                    source,
                }
            })?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(super::REQUEST_TIMEOUT));
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rig\r\n\r\n",
            target.path, target.host
        )
        .into_bytes();
        Ok(Conn {
            stream,
            request,
            buf: Vec::with_capacity(4096),
            broken: false,
        })
    }

    /// Send one request in one write and read its whole response.
    fn request(&mut self) -> Result<(), String> {
        if self.broken {
            return Err("connection closed earlier".into());
        }
        // A transport or framing error leaves the stream unusable; a
        // complete response with a bad status does not.
        let status = self.exchange().inspect_err(|_| self.broken = true)?;
        if status != 200 {
            return Err(format!("status {status}"));
        }
        Ok(())
    }

    /// One request/response, all of it within the request timeout (a
    /// server that drips its answer a byte at a time is a timeout, not a
    /// wait of minutes); returns the status. The head is parsed as the
    /// async generator parses it (`h1::parse_head`: CRLF lines, interim
    /// 1xx responses skipped, Content-Length or chunked), so a malformed
    /// answer is said at once.
    fn exchange(&mut self) -> Result<u16, String> {
        use super::h1::{decode_chunked, parse_head, Framing};
        let until = std::time::Instant::now() + super::REQUEST_TIMEOUT;
        self.stream
            .write_all(&self.request)
            .map_err(|e| format!("io: {}", e.kind()))?;
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        let mut read = |stream: &mut TcpStream, buf: &mut Vec<u8>, what: &str| {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err("timeout".to_string());
            }
            let _ = stream.set_read_timeout(Some(left));
            match stream.read(&mut chunk) {
                Ok(0) => Err(format!("io: connection closed mid-{what}")),
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err("timeout".into()),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err("timeout".into()),
                Err(e) => Err(format!("io: {}", e.kind())),
            }
        };
        let mut start = 0;
        let head = loop {
            match parse_head(&self.buf[start..]).map_err(str::to_string)? {
                Some(h) if (100..200).contains(&h.status) && h.status != 101 => start += h.len,
                Some(h) => break h,
                None => read(&mut self.stream, &mut self.buf, "response")?,
            }
        };
        let body = start + head.len;
        let end = match head.framing {
            Framing::Length(n) => {
                while self.buf.len() < body + n {
                    read(&mut self.stream, &mut self.buf, "body")?;
                }
                body + n
            }
            Framing::Chunked => {
                let mut out = Vec::new();
                loop {
                    match decode_chunked(&self.buf[body..], &mut out).map_err(str::to_string)? {
                        Some(n) => break body + n,
                        None => read(&mut self.stream, &mut self.buf, "body")?,
                    }
                }
            }
            Framing::UntilClose => {
                return Err("no content-length: the body runs to the connection's end, \
                            which a keep-alive connection cannot carry"
                    .into())
            }
        };
        if self.buf.len() > end {
            return Err("more bytes than the response".into());
        }
        if head.close {
            // The server closes after this response: the connection is
            // not reused (the next request fails as closed).
            self.broken = true;
        }
        Ok(head.status)
    }
}

/// Open `n` connections.
pub fn connect(target: &H1Target, n: usize) -> Result<Vec<Conn>, LoadError> {
    (0..n).map(|_| Conn::open(target)).collect()
}

/// Send exactly `total` requests spread over `conns` (one thread each, closed
/// loop, one request in flight per connection).
pub fn fixed_count(conns: &mut [Conn], total: u64) -> LoadResult {
    let n = conns.len() as u64;
    let mut result = LoadResult::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let share = total / n + u64::from((i as u64) < total % n);
                s.spawn(move || {
                    let mut r = LoadResult::default();
                    for _ in 0..share {
                        // SIGINT/SIGTERM: stop sending at once.
                        if crate::interrupt::requested() {
                            break;
                        }
                        r.sent += 1;
                        match c.request() {
                            Ok(()) => r.succeeded += 1,
                            Err(kind) => *r.errors.entry(kind).or_default() += 1,
                        }
                    }
                    r
                })
            })
            .collect();
        for h in handles {
            result.merge(h.join().expect("load thread panicked"));
        }
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn refuses_non_loopback_targets() {
        let e = H1Target::parse("http://10.1.2.3:80/").unwrap_err();
        assert!(matches!(e, LoadError::NotLoopback { .. }), "{e}");
        assert!(H1Target::parse("https://127.0.0.1:1/").is_err());
        assert!(H1Target::parse("http://127.0.0.1/").is_err());
        let t = H1Target::parse("http://127.0.0.1:8080/calib").unwrap();
        assert_eq!(t.path, "/calib");
        assert_eq!(t.addr.port(), 8080);
    }

    /// A tiny in-process server: answers every request on each connection
    /// with `responses` in turn.
    fn serve(responses: Vec<&'static str>) -> H1Target {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                let responses = responses.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    for r in responses.iter().cycle() {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(_) => s.write_all(r.as_bytes()).unwrap(),
                        }
                    }
                });
            }
        });
        H1Target::parse(&format!("http://127.0.0.1:{port}/x")).unwrap()
    }

    #[test]
    fn counts_exact_successes_over_connections() {
        let t = serve(vec!["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]);
        let mut conns = connect(&t, 3).unwrap();
        let r = fixed_count(&mut conns, 100);
        assert_eq!(r.sent, 100);
        assert_eq!(r.succeeded, 100);
        assert!(r.errors.is_empty());
    }

    #[test]
    fn counts_failures_by_kind() {
        let t = serve(vec![
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n",
        ]);
        let mut conns = connect(&t, 1).unwrap();
        let r = fixed_count(&mut conns, 10);
        assert_eq!(r.succeeded, 5);
        assert_eq!(r.errors.get("status 503"), Some(&5));
        assert_eq!(r.sent, r.succeeded + r.failed());
    }
}
