//! Output equality between arms, byte for byte: a cheaper arm that answers
//! differently is not the same server made cheaper.
//!
//! Each arm answers the same request set on a fresh server; the raw
//! responses (status line, headers, body) are compared with the values of
//! volatile headers (`Date` by default) masked. Equality alone proves
//! nothing when both arms ran the same code path: the report pairs it with
//! the counter differences of the counted passes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::Serialize;

/// A byte stream both ways: a TCP connection, or TLS over one.
trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// One request's raw response, masked.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Captured {
    pub path: String,
    /// Status line and headers (masked values), then the body, as text
    /// where it is UTF-8 and escaped otherwise.
    pub response: String,
    pub bytes: usize,
}

/// Send `GET path` on a fresh connection and return the masked response.
pub fn capture(addr: SocketAddr, path: &str, masks: &[String]) -> Result<Captured, String> {
    let mut s = connect(addr)?;
    exchange(&mut s, addr, path, masks)
}

/// [`capture`] over TLS (ALPN `http/1.1`, the spec's CA and server name),
/// for a target whose TCP port speaks nothing but TLS.
pub fn capture_tls(
    addr: SocketAddr,
    tls: &crate::launch::spec::TlsSpec,
    path: &str,
    masks: &[String],
) -> Result<Captured, String> {
    let ca = tls.ca.as_deref().unwrap_or(std::path::Path::new(""));
    let (config, name) =
        crate::load::tls_client_config(ca, &tls.server_name, "http/1.1", tls.insecure)
            .map_err(|e| e.to_string())?;
    let session = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| format!("TLS: {e}"))?;
    let mut s = rustls::StreamOwned::new(session, connect(addr)?);
    exchange(&mut s, addr, path, masks).map_err(|e| {
        if e.contains("NoApplicationProtocol") {
            format!(
                "{e}: the server refused HTTP/1.1 over TLS; the output comparison speaks \
                 HTTP/1.1 (plain or over TLS) or HTTP/3"
            )
        } else {
            e
        }
    })
}

/// A TCP connection to `addr`, its connect and every read bounded.
fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.set_write_timeout(Some(Duration::from_secs(10))).ok();
    Ok(s)
}

/// One HTTP/1.1 `GET path` on `s` and its whole response, masked.
fn exchange(
    s: &mut impl ReadWrite,
    addr: SocketAddr,
    path: &str,
    masks: &[String],
) -> Result<Captured, String> {
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: rig\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("sending GET {path}: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("reading {path}: {e}"))?;
        if n == 0 {
            return Err(format!(
                "{path}: connection closed before the headers ended"
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .ok_or_else(|| format!("{path}: response without content-length"))?;
    while buf.len() < head_end + len {
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("reading {path}: {e}"))?;
        if n == 0 {
            return Err(format!("{path}: connection closed mid-body"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let masked_head: String = head
        .split("\r\n")
        .map(|line| match line.split_once(':') {
            Some((k, _)) if masks.iter().any(|m| m.eq_ignore_ascii_case(k.trim())) => {
                format!("{k}: <masked>")
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\r\n");
    let body = &buf[head_end..head_end + len];
    let body_text = match std::str::from_utf8(body) {
        Ok(t) => t.to_string(),
        Err(_) => body.iter().map(|b| format!("\\x{b:02x}")).collect(),
    };
    Ok(Captured {
        path: path.to_string(),
        bytes: head_end + len,
        response: format!("{masked_head}{body_text}"),
    })
}

/// [`capture`] over HTTP/3 (`spec` names the server and its trust), for a
/// target that serves nothing else: the status and headers in the order
/// h3 gave them, as `HTTP/3 STATUS` and `name: value` lines, then the body.
pub fn capture_h3(spec: &crate::load::LoadSpec, masks: &[String]) -> Result<Captured, String> {
    let path = &spec.endpoint.path;
    let f = crate::load::fetch_h3(spec).map_err(|e| format!("{path}: {e}"))?;
    let mut head = format!("HTTP/3 {}\r\n", f.status);
    for (k, v) in &f.headers {
        let value = match masks.iter().any(|m| m.eq_ignore_ascii_case(k)) {
            true => "<masked>".to_string(),
            false => String::from_utf8_lossy(v).into_owned(),
        };
        head.push_str(&format!("{k}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let bytes = head.len() + f.body.len();
    let body_text = match std::str::from_utf8(&f.body) {
        Ok(t) => t.to_string(),
        Err(_) => f.body.iter().map(|b| format!("\\x{b:02x}")).collect(),
    };
    Ok(Captured {
        path: path.clone(),
        bytes,
        response: format!("{head}{body_text}"),
    })
}

/// Where two arms' responses differ, one line per difference.
pub fn differences(a: &[Captured], b: &[Captured]) -> Vec<String> {
    let mut out = Vec::new();
    for ca in a {
        match b.iter().find(|cb| cb.path == ca.path) {
            None => out.push(format!("{}: answered by one arm only", ca.path)),
            Some(cb) if cb.response != ca.response => {
                let la: Vec<&str> = ca.response.split("\r\n").collect();
                let lb: Vec<&str> = cb.response.split("\r\n").collect();
                let first = la
                    .iter()
                    .zip(lb.iter())
                    .position(|(x, y)| x != y)
                    .unwrap_or(la.len().min(lb.len()));
                out.push(format!(
                    "{}: differs at line {}: {:?} vs {:?}",
                    ca.path,
                    first + 1,
                    la.get(first).copied().unwrap_or("<end>"),
                    lb.get(first).copied().unwrap_or("<end>")
                ));
            }
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(path: &str, r: &str) -> Captured {
        Captured {
            path: path.into(),
            response: r.into(),
            bytes: r.len(),
        }
    }

    #[test]
    fn lists_differences_by_path_and_line() {
        let a = vec![
            c("/x", "HTTP/1.1 200 OK\r\nA: 1\r\n\r\nhello"),
            c("/y", "same"),
        ];
        let b = vec![
            c("/x", "HTTP/1.1 200 OK\r\nA: 2\r\n\r\nhello"),
            c("/y", "same"),
        ];
        let d = differences(&a, &b);
        assert_eq!(
            d,
            vec!["/x: differs at line 2: \"A: 1\" vs \"A: 2\"".to_string()]
        );
        assert!(differences(&a, &a).is_empty());
    }

    #[test]
    fn masks_volatile_headers() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten().take(2) {
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b);
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nDate: Mon, 30 Nov 2026 10:00:00 GMT\r\nContent-Length: 2\r\n\r\nok",
                );
            }
        });
        let got = capture(addr, "/", &["date".to_string()]).unwrap();
        assert_eq!(
            got.response,
            "HTTP/1.1 200 OK\r\nDate: <masked>\r\nContent-Length: 2\r\n\r\nok"
        );
        let raw = capture(addr, "/", &[]).unwrap();
        assert!(raw.response.contains("10:00:00 GMT"));
    }
}
