//! HTTP/1.1: the request is serialized once (`Setup::h1_request`) and written
//! in one write; the response is parsed in place in the connection's read
//! buffer (status line, `Content-Length`, `Transfer-Encoding: chunked`,
//! `Content-Type`, `Connection: close`) and its body validated without a
//! copy unless it was chunked. One request in flight per connection.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::{open, Io, Setup, Stats, LOST};
use super::validate::{check, decode_body};
use super::MAX_CONSECUTIVE_CONN_FAILURES;

/// How the body of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(usize),
    Chunked,
    /// No length: the body runs to the end of the connection.
    UntilClose,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub status: u16,
    /// Bytes of status line + headers + the empty line.
    pub len: usize,
    pub framing: Framing,
    /// The server closes the connection after this response.
    pub close: bool,
    /// Value of `Content-Type`, as a range of the head.
    pub content_type: Option<Range<usize>>,
    /// Value of `Content-Encoding`, as a range of the head.
    pub content_encoding: Option<Range<usize>>,
}

/// Parse a response head at the start of `b`. `Ok(None)`: incomplete.
// Long by design: one pass over the response head, each header case next
// to the check it needs; the order of the checks is the protocol's.
pub(crate) fn parse_head(b: &[u8]) -> Result<Option<Head>, &'static str> {
    let Some(line_end) = find_crlf(b, 0)? else {
        return if b.len() > 64 * 1024 {
            Err("parse: head too long")
        } else {
            Ok(None)
        };
    };
    let line = &b[..line_end];
    if line.len() < 12 || !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
        return Err("parse: bad status line");
    }
    let http10 = line[7] == b'0';
    let d = &line[9..12];
    if !d.iter().all(u8::is_ascii_digit) {
        return Err("parse: bad status code");
    }
    let status = (d[0] - b'0') as u16 * 100 + (d[1] - b'0') as u16 * 10 + (d[2] - b'0') as u16;
    let mut pos = line_end + 2;
    let mut length = None;
    let mut chunked = false;
    let mut close = http10;
    let mut content_type = None;
    let mut content_encoding = None;
    loop {
        let Some(end) = find_crlf(b, pos)? else {
            return if b.len() > 64 * 1024 {
                Err("parse: head too long")
            } else {
                Ok(None)
            };
        };
        if end == pos {
            pos += 2;
            break;
        }
        let h = &b[pos..end];
        let colon = h
            .iter()
            .position(|&c| c == b':')
            .ok_or("parse: header without colon")?;
        let (name, value) = (&h[..colon], h[colon + 1..].trim_ascii());
        match name.len() {
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let n = parse_decimal(value).ok_or("parse: bad content-length")?;
                if length.is_some_and(|l| l != n) {
                    return Err("parse: conflicting content-length");
                }
                length = Some(n);
            }
            12 if name.eq_ignore_ascii_case(b"content-type") => {
                let start = pos
                    + colon
                    + 1
                    + (h[colon + 1..].len() - h[colon + 1..].trim_ascii_start().len());
                content_type = Some(start..start + value.len());
            }
            16 if name.eq_ignore_ascii_case(b"content-encoding") => {
                let start = pos
                    + colon
                    + 1
                    + (h[colon + 1..].len() - h[colon + 1..].trim_ascii_start().len());
                content_encoding = Some(start..start + value.len());
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                chunked = value
                    .rsplit(|&c| c == b',')
                    .next()
                    .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for t in value.split(|&c| c == b',') {
                    let t = t.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        close = false;
                    }
                }
            }
            _ => {}
        }
        pos = end + 2;
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        close = true;
        Framing::UntilClose
    };
    Ok(Some(Head {
        status,
        len: pos,
        framing,
        close,
        content_type,
        content_encoding,
    }))
}

/// Where the line starting at `from` ends (its CR). A line that ends in
/// LF alone is malformed, said at once: waiting for a CRLF that never
/// comes would turn it into a timeout.
fn find_crlf(b: &[u8], from: usize) -> Result<Option<usize>, &'static str> {
    let Some(off) = b
        .get(from..)
        .and_then(|r| r.iter().position(|&c| c == b'\n'))
    else {
        return Ok(None);
    };
    let nl = from + off;
    match nl > from && b[nl - 1] == b'\r' {
        true => Ok(Some(nl - 1)),
        false => Err("parse: a line ends in LF without CR (HTTP/1.1 lines end in CRLF)"),
    }
}

fn parse_decimal(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 18 {
        return None;
    }
    v.iter().try_fold(0usize, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + (c - b'0') as usize)
    })
}

/// Decode a chunked body at the start of `b` into `out`. `Ok(Some(n))`: the
/// whole body (through the trailers) took `n` bytes; `Ok(None)`: incomplete.
pub(crate) fn decode_chunked(b: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, &'static str> {
    out.clear();
    let mut pos = 0;
    loop {
        let Some(end) = find_crlf(b, pos)? else {
            return Ok(None);
        };
        let line = &b[pos..end];
        let hex = match line.iter().position(|&c| c == b';') {
            Some(i) => &line[..i],
            None => line,
        }
        .trim_ascii();
        if hex.is_empty() || hex.len() > 15 {
            return Err("parse: bad chunk size");
        }
        let mut size = 0usize;
        for &c in hex {
            let v = (c as char).to_digit(16).ok_or("parse: bad chunk size")?;
            size = size * 16 + v as usize;
        }
        pos = end + 2;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let Some(end) = find_crlf(b, pos)? else {
                    return Ok(None);
                };
                let empty = end == pos;
                pos = end + 2;
                if empty {
                    return Ok(Some(pos));
                }
            }
        }
        if b.len() < pos + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[pos..pos + size]);
        if &b[pos + size..pos + size + 2] != b"\r\n" {
            return Err("parse: chunk not followed by CRLF");
        }
        pos += size + 2;
    }
}

/// Result of one exchange on a connection.
pub(crate) struct Exchange {
    pub result: Result<(), String>,
    /// The connection may carry another request.
    pub keep: bool,
    /// Transport failure (not a complete but invalid response).
    pub broken: bool,
    /// Nothing came back on a reused connection (the server had closed it
    /// while idle): the request may be retried on a new one.
    pub retry: bool,
}

pub(crate) struct H1Conn {
    io: Io,
    buf: Vec<u8>,
    /// Valid bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    chunked: Vec<u8>,
    used: bool,
}

const BUF: usize = 16 * 1024;

impl H1Conn {
    pub fn new(io: Io) -> H1Conn {
        H1Conn {
            io,
            buf: vec![0; BUF],
            start: 0,
            end: 0,
            chunked: Vec::new(),
            used: false,
        }
    }

    /// Read more bytes; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
        }
        let n = self.io.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }

    // Long by design: one request/response on a connection, with every way it
    // can fail classified where it happens (a failed request is data).
    pub async fn exchange(&mut self, request: &[u8], setup: &Setup) -> Exchange {
        let reused = self.used;
        self.used = true;
        let broken = |kind: String, retry: bool| Exchange {
            result: Err(kind),
            keep: false,
            broken: true,
            retry,
        };
        if let Err(e) = self.io.write_all(request).await {
            return broken(format!("io: {:?}", e.kind()), reused);
        }
        if let Io::Tls(_) = self.io {
            if let Err(e) = self.io.flush().await {
                return broken(format!("io: {:?}", e.kind()), reused);
            }
        }
        let head = loop {
            match parse_head(&self.buf[self.start..self.end]) {
                // An interim response (100 Continue, 103 Early Hints): the
                // final one follows on the same connection.
                Ok(Some(h)) if (100..200).contains(&h.status) && h.status != 101 => {
                    self.start += h.len;
                    continue;
                }
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(kind) => return broken(kind.into(), false),
            }
            let nothing_yet = self.start == self.end;
            match self.fill().await {
                Ok(0) if nothing_yet => return broken("io: closed before response".into(), reused),
                Ok(0) => return broken("io: closed mid-response".into(), false),
                Ok(_) => {}
                Err(e) => {
                    let retry =
                        reused && nothing_yet && e.kind() == std::io::ErrorKind::ConnectionReset;
                    return broken(format!("io: {:?}", e.kind()), retry);
                }
            }
        };
        let body_start = self.start + head.len;
        let (body, total): (Range<usize>, usize) = match head.framing {
            Framing::Length(n) => {
                while self.end - self.start < head.len + n {
                    match self.fill().await {
                        Ok(0) => return broken("io: closed mid-body".into(), false),
                        Ok(_) => {}
                        Err(e) => return broken(format!("io: {:?}", e.kind()), false),
                    }
                }
                (body_start..body_start + n, head.len + n)
            }
            Framing::Chunked => loop {
                let start = self.start + head.len;
                match decode_chunked(&self.buf[start..self.end], &mut self.chunked) {
                    Ok(Some(n)) => break (0..0, head.len + n),
                    Ok(None) => {}
                    Err(kind) => return broken(kind.into(), false),
                }
                match self.fill().await {
                    Ok(0) => return broken("io: closed mid-body".into(), false),
                    Ok(_) => {}
                    Err(e) => return broken(format!("io: {:?}", e.kind()), false),
                }
            },
            Framing::UntilClose => loop {
                match self.fill().await {
                    Ok(0) => break (body_start..self.end, self.end - self.start),
                    Ok(_) => {}
                    Err(e) => return broken(format!("io: {:?}", e.kind()), false),
                }
            },
        };
        let ct = head
            .content_type
            .as_ref()
            .map(|r| &self.buf[self.start + r.start..self.start + r.end]);
        let body_bytes = if head.framing == Framing::Chunked {
            &self.chunked[..]
        } else {
            &self.buf[body.clone()]
        };
        // A compressed body is compared decoded (only when it is compared).
        let encoding = head
            .content_encoding
            .as_ref()
            .filter(|_| head.status == setup.expect.status)
            .filter(|_| setup.expect.body != super::ExpectBody::Any)
            .map(|r| &self.buf[self.start + r.start..self.start + r.end]);
        let decoded = encoding.map(|e| decode_body(e, body_bytes));
        let result = match &decoded {
            Some(Err(kind)) => Err(kind.clone()),
            Some(Ok(d)) => check(&setup.expect, head.status, ct, d),
            None => check(&setup.expect, head.status, ct, body_bytes),
        };
        self.start += total;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        // Bytes beyond the response: the server answered something we did
        // not ask for; the connection cannot be trusted.
        let extra = self.end > self.start;
        Exchange {
            result: if extra && result.is_ok() {
                Err("parse: bytes after response".into())
            } else {
                result
            },
            keep: !head.close && !extra && setup.keepalive,
            broken: extra,
            retry: false,
        }
    }
}

/// One HTTP/1.1 request stream: a keep-alive connection (re-established when
/// it breaks or the server closes it) or a new connection per request.
pub(crate) struct H1Slot {
    setup: Arc<Setup>,
    conn: Option<H1Conn>,
    fails: u32,
    /// When the last request was handed to the socket (see `request`).
    pub sent_at: Instant,
}

impl H1Slot {
    pub fn new(setup: Arc<Setup>, conn: Option<H1Conn>) -> H1Slot {
        H1Slot {
            setup,
            conn,
            fails: 0,
            sent_at: Instant::now(),
        }
    }

    pub fn dead(&self) -> bool {
        self.fails >= MAX_CONSECUTIVE_CONN_FAILURES
    }

    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    pub fn setup_arc(&self) -> Arc<Setup> {
        self.setup.clone()
    }

    pub fn revive(&mut self) {
        self.fails = 0;
    }

    /// A request was abandoned mid-exchange (timeout): the connection's
    /// state is unknown.
    pub fn abandon(&mut self) {
        self.conn = None;
        self.fails += 1;
    }

    pub async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        // The request's bytes go to the socket next (its `write` is the first
        // thing `exchange` does), or its connection is opened first: either
        // way the request starts now. A retry is the same request.
        self.sent_at = Instant::now();
        for attempt in 0..2 {
            if self.dead() {
                return Err(LOST.into());
            }
            let conn = match &mut self.conn {
                Some(c) => c,
                None => match open(&self.setup, stats).await {
                    Ok(io) => self.conn.insert(H1Conn::new(io)),
                    Err(kind) => {
                        self.fails += 1;
                        return Err(kind);
                    }
                },
            };
            let x = conn.exchange(&self.setup.h1_request, &self.setup).await;
            if !x.keep {
                self.conn = None;
            }
            match x.result {
                Ok(()) => {
                    self.fails = 0;
                    return Ok(());
                }
                Err(_) if x.retry && attempt == 0 => continue,
                Err(kind) => {
                    if x.broken {
                        self.fails += 1;
                    }
                    return Err(kind);
                }
            }
        }
        unreachable!("the second attempt returns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_content_length_head() {
        let r = b"HTTP/1.1 200 OK\r\nServer: x\r\ncontent-type:  text/plain \r\nContent-Length: 5\r\n\r\nhello";
        let h = parse_head(r).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, Framing::Length(5));
        assert!(!h.close);
        assert_eq!(&r[h.content_type.unwrap()], b"text/plain");
        assert_eq!(&r[h.len..], b"hello");
    }

    #[test]
    fn incomplete_heads_ask_for_more() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        for n in 0..r.len() {
            assert_eq!(parse_head(&r[..n]), Ok(None), "{n}");
        }
        assert!(parse_head(r).unwrap().is_some());
    }

    #[test]
    fn close_chunked_and_bodiless_heads() {
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.close);
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.close), (Framing::UntilClose, true));
        let h = parse_head(b"HTTP/1.1 204 No Content\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(0));
        assert!(parse_head(b"HTTX/1.1 200 OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    }

    #[test]
    fn a_head_with_lf_line_ends_is_malformed_at_once() {
        for r in [
            &b"HTTP/1.1 200 OK\nContent-Length: 6\n\ntrial\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\n",
        ] {
            let e = parse_head(r).unwrap_err();
            assert!(e.contains("LF without CR"), "{e}");
        }
        // A status line not yet ended is only incomplete.
        assert_eq!(parse_head(b"HTTP/1.1 200 OK"), Ok(None));
        let mut out = Vec::new();
        assert!(decode_chunked(b"3\ntri\r\n0\r\n\r\n", &mut out).is_err());
    }

    #[test]
    fn decodes_chunked_bodies_with_extensions_and_trailers() {
        let mut out = Vec::new();
        let b = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        assert_eq!(decode_chunked(b, &mut out), Ok(Some(b.len() - 4)));
        assert_eq!(out, b"hello world");
        for n in 0..b.len() - 4 {
            assert_eq!(decode_chunked(&b[..n], &mut out), Ok(None), "{n}");
        }
        assert!(decode_chunked(b"zz\r\n", &mut out).is_err());
    }
}
