//! What a port says to one plain HTTP/1.1 request: for the message of a
//! `--drive` that failed, so it names what the port speaks (plain HTTP to
//! an https:// URL, Redis's or memcached's protocol, TLS, silence) instead
//! of the error the client library met first.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long the port gets to answer.
const WAIT: Duration = Duration::from_millis(500);

/// One sentence on what `addr` answered to `GET / HTTP/1.1`, or `None`
/// when it could not be asked (nothing listens).
pub fn what_it_speaks(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, WAIT).ok()?;
    s.set_read_timeout(Some(WAIT)).ok()?;
    s.set_write_timeout(Some(WAIT)).ok()?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut buf = [0u8; 64];
    let n = match s.read(&mut buf) {
        Ok(n) => n,
        Err(e)
            if e.kind() == std::io::ErrorKind::WouldBlock
                || e.kind() == std::io::ErrorKind::TimedOut =>
        {
            return Some(format!(
                "port {} said nothing within {} ms to a plain HTTP request (a TLS port waits for a \
                 ClientHello: try https://)",
                addr.port(),
                WAIT.as_millis()
            ))
        }
        Err(_) => 0,
    };
    Some(describe(addr.port(), &buf[..n]))
}

/// What the first bytes of an answer to a plain HTTP request say.
fn describe(port: u16, b: &[u8]) -> String {
    let shown: String = b
        .iter()
        .take(40)
        .flat_map(|&c| std::ascii::escape_default(c))
        .map(char::from)
        .collect();
    let what = if b.is_empty() {
        "closed the connection without answering: it does not speak HTTP (Redis closes on an \
         HTTP request so)"
            .to_string()
    } else if b.starts_with(b"HTTP/") {
        "answered plain HTTP (not TLS): give an http:// URL".to_string()
    } else if b[0] == 0x15 && b.get(1) == Some(&3) {
        "answered with a TLS alert: it speaks TLS, give an https:// URL".to_string()
    } else if b.starts_with(b"ERROR") || b.starts_with(b"CLIENT_ERROR") {
        format!("answered `{shown}`: it does not speak HTTP (memcached answers so)")
    } else if b[0] == b'-' || b[0] == b'+' {
        format!("answered `{shown}`: it does not speak HTTP (a Redis-protocol server answers so)")
    } else {
        format!("answered `{shown}`: it does not speak HTTP/1.1")
    };
    format!("port {port} {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_name_the_protocol() {
        assert!(describe(1, b"HTTP/1.0 200 OK\r\n").contains("plain HTTP (not TLS)"));
        assert!(describe(1, b"").contains("without answering"));
        assert!(describe(1, b"\x15\x03\x03\x00\x02\x02\x46").contains("speaks TLS"));
        assert!(describe(1, b"ERROR\r\n").contains("memcached"));
        assert!(describe(1, b"-ERR unknown command").contains("Redis-protocol"));
        assert!(describe(1, b"\x1b[2J").contains("`\\x1b[2J`"));
    }

    #[test]
    fn a_plain_http_port_is_said_to_answer_plain_http() {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut b = [0u8; 256];
            let _ = c.read(&mut b);
            c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        });
        let said = what_it_speaks(addr).unwrap();
        t.join().unwrap();
        assert!(said.contains("answered plain HTTP"), "{said}");
    }
}
