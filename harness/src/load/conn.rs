//! What every connection of a client shares (`Setup`), the byte stream under
//! HTTP (`Io`: TCP or TLS over TCP), opening one, and the per-thread
//! counters the requests record into.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::{hist, Expect, Handshakes, LoadError, LoadSpec, Protocol};

/// Immutable facts every connection of one client uses.
pub(crate) struct Setup {
    pub addr: SocketAddr,
    pub tls: Option<(TlsConnector, ServerName<'static>)>,
    pub h2: bool,
    /// HTTP/3 over QUIC: its client configuration and request URI.
    pub h3: Option<super::h3::H3Setup>,
    pub keepalive: bool,
    pub streams: usize,
    /// HTTP/1.1: the whole request, serialized once.
    pub h1_request: Vec<u8>,
    /// HTTP/2: the request's header block, HPACK-encoded once.
    pub h2_block: Vec<u8>,
    pub expect: Expect,
    /// See [`LoadSpec::request_timeout`].
    pub request_timeout: std::time::Duration,
    /// See [`LoadSpec::deadline`].
    pub deadline: Option<Instant>,
}

impl Setup {
    pub fn new(spec: &LoadSpec) -> Result<Setup, LoadError> {
        if !spec.addr.ip().is_loopback() {
            return Err(LoadError::NotLoopback {
                url: spec.addr.to_string(),
                addr: spec.addr,
            });
        }
        let path = &spec.endpoint.path;
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(LoadError::Spec(format!(
                "endpoint path `{path}` must start with `/` and contain no spaces or control bytes"
            )));
        }
        let mut quic = None;
        let (h2, keepalive, tls) = match &spec.protocol {
            Protocol::H1 { keepalive } => (false, *keepalive, None),
            Protocol::H3 {
                ca_pem,
                server_name,
                insecure,
            } => {
                quic = Some((ca_pem, server_name, *insecure));
                (false, true, None)
            }
            Protocol::H2c => (true, true, None),
            Protocol::H2Tls {
                ca_pem,
                server_name,
                insecure,
            } => (true, true, Some((ca_pem, server_name, "h2", *insecure))),
            Protocol::H1Tls {
                ca_pem,
                server_name,
                insecure,
            } => (
                false,
                true,
                Some((ca_pem, server_name, "http/1.1", *insecure)),
            ),
        };
        if !h2 && quic.is_none() && spec.streams != 1 {
            return Err(LoadError::Spec(format!(
                "streams is {}; HTTP/1.1 has one request in flight per connection, give 1",
                spec.streams
            )));
        }
        if spec.streams == 0 {
            return Err(LoadError::Spec("streams must be at least 1".into()));
        }
        if spec.request_timeout.is_zero() {
            return Err(LoadError::Spec(
                "request_timeout is 0: give a request the time to be answered".into(),
            ));
        }
        let tls = match tls {
            Some((ca, name, alpn, insecure)) => {
                Some(super::tls::connector(ca, name, alpn, insecure)?)
            }
            None => None,
        };
        let authority = match &tls {
            Some((_, ServerName::DnsName(n))) => format!("{}:{}", n.as_ref(), spec.addr.port()),
            _ => match quic {
                Some((_, name, _))
                    if super::tls::server_name_of(name)
                        .is_ok_and(|n| matches!(n, ServerName::DnsName(_))) =>
                {
                    format!("{name}:{}", spec.addr.port())
                }
                _ => spec.addr.to_string(),
            },
        };
        let h3 = match quic {
            Some((ca, name, insecure)) => {
                let config = super::tls::client_config(ca, super::h3::ALPN, insecure)?;
                super::tls::server_name_of(name)?;
                Some(super::h3::H3Setup::new(config, name, &authority, path)?)
            }
            None => None,
        };
        let mut h1_request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n");
        if !keepalive {
            h1_request.push_str("Connection: close\r\n");
        }
        h1_request.push_str("\r\n");
        let h2_block = super::h2::request_block(tls.is_some(), &authority, path);
        Ok(Setup {
            addr: spec.addr,
            tls,
            h2,
            h3,
            keepalive,
            streams: spec.streams,
            h1_request: h1_request.into_bytes(),
            h2_block,
            expect: spec.endpoint.expect.clone(),
            request_timeout: spec.request_timeout,
            deadline: spec.deadline,
        })
    }

    /// The deadline has passed: send nothing more.
    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// When something started now must be given up: after the request
    /// timeout, or at the deadline if that comes first.
    pub fn give_up_at(&self, now: Instant) -> Instant {
        let t = now + self.request_timeout;
        self.deadline.map_or(t, |d| d.min(t))
    }
}

/// `f`, given up at [`Setup::give_up_at`] (with `Err(late(at_deadline))`,
/// `at_deadline` when the deadline, not the timeout, came first) or as
/// soon as rig is interrupted (checked every 50 ms): no connect, handshake
/// or response is waited for without bound, and none outlasts a signal.
pub(crate) async fn bounded<T>(
    setup: &Setup,
    f: impl std::future::Future<Output = Result<T, String>>,
    late: impl FnOnce(bool) -> String,
) -> Result<T, String> {
    let now = Instant::now();
    let until = setup.give_up_at(now);
    let at_deadline = until < now + setup.request_timeout;
    let mut f = std::pin::pin!(f);
    loop {
        let step = (Instant::now() + std::time::Duration::from_millis(50)).min(until);
        if let Ok(r) = tokio::time::timeout_at(step.into(), &mut f).await {
            return r;
        }
        if crate::interrupt::requested() {
            return Err(INTERRUPTED.into());
        }
        if Instant::now() >= until {
            return Err(late(at_deadline));
        }
    }
}

/// Error kind of a request or handshake cut by SIGINT/SIGTERM/SIGHUP.
pub(crate) const INTERRUPTED: &str = "interrupted";

/// TCP, or TLS over TCP.
pub(crate) enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Open one connection: TCP, then TLS when configured. Errors are kinds
/// (`connect: ConnectionRefused`, `tls: invalid peer certificate: ...`).
/// Each step is [`bounded`]: a server that accepts and never answers the
/// TLS ClientHello (a plaintext server on an `https://` URL) fails the
/// handshake after the request timeout instead of holding rig forever.
pub(crate) async fn open(setup: &Setup, stats: &Stats) -> Result<Io, String> {
    let secs = setup.request_timeout.as_secs_f64();
    let connect = async {
        TcpStream::connect(setup.addr)
            .await
            .map_err(|e| format!("connect: {:?}", e.kind()))
    };
    let tcp = bounded(setup, connect, |at_deadline| match at_deadline {
        true => format!("connect: cut at the {}", super::DEADLINE),
        false => format!("connect: no connection within {secs} s"),
    })
    .await?;
    let _ = tcp.set_nodelay(true);
    stats.handshakes.borrow_mut().tcp += 1;
    let Some((connector, name)) = &setup.tls else {
        return Ok(Io::Plain(tcp));
    };
    let handshake = async {
        connector
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| match e.get_ref() {
                Some(inner) => format!("tls: {inner}"),
                None => format!("tls: {:?}", e.kind()),
            })
    };
    let tls = bounded(setup, handshake, |at_deadline| match at_deadline {
        true => format!("tls: cut at the {}", super::DEADLINE),
        false => format!(
            "tls: no handshake within {secs} s: the server took the connection and never \
             answered the ClientHello (does it speak TLS on this port?)"
        ),
    })
    .await?;
    let alpn = tls.get_ref().1.alpn_protocol();
    let want: &[u8] = if setup.h2 { b"h2" } else { b"http/1.1" };
    // A server without ALPN speaks HTTP/1.1; h2 must be negotiated.
    if alpn != Some(want) && (setup.h2 || alpn.is_some()) {
        return Err(format!(
            "tls: server negotiated ALPN {:?}, not {}",
            alpn.map(String::from_utf8_lossy),
            String::from_utf8_lossy(want)
        ));
    }
    stats.handshakes.borrow_mut().tls += 1;
    Ok(Io::Tls(Box::new(tls)))
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Counters of one generator thread (single-threaded: `RefCell`s).
pub(crate) struct Stats {
    pub handshakes: RefCell<Handshakes>,
    pub run: RefCell<RunStats>,
}

#[derive(Default)]
pub(crate) struct RunStats {
    pub scheduled: u64,
    pub sent: u64,
    /// Open loop: sent on a stream that was free at the send time.
    pub on_time: u64,
    /// Open loop: waited in the queue for a stream to free up.
    pub late: u64,
    /// Open loop: sent requests whose generator lag exceeded `LATE_AFTER`.
    pub generator_late: u64,
    pub succeeded: u64,
    pub errors: BTreeMap<String, u64>,
    /// Requests never handed to a socket, by why: their connection was
    /// given up, the case's deadline passed, rig was interrupted.
    pub not_sent: BTreeMap<String, u64>,
    pub expired: u64,
    /// Wall time the dispatcher spent spinning toward send times, less the
    /// request work it ran while spinning.
    pub spin_ns: u64,
    pub hists: Option<hist::Hists>,
    /// Completion time of the last request.
    pub last: Option<Instant>,
}

/// When one request was due, could go, and went.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    /// Open loop: its scheduled send time.
    pub due: Option<Instant>,
    /// Open loop, queued: when a stream freed up for it.
    pub freed: Option<Instant>,
    /// When its bytes were handed to the socket (or its connection was
    /// opened, for a request that needed one).
    pub sent: Instant,
}

impl Timing {
    /// Closed loop and fixed count: no schedule.
    pub fn closed(sent: Instant) -> Timing {
        Timing {
            due: None,
            freed: None,
            sent,
        }
    }
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            handshakes: RefCell::new(Handshakes::default()),
            run: RefCell::new(RunStats {
                hists: Some(hist::Hists::new()),
                ..RunStats::default()
            }),
        }
    }

    /// One request finished. A request on a connection already given up
    /// ([`LOST`]) never reached a socket: it is not sent.
    pub fn done(&self, t: Timing, r: Result<(), String>) {
        if matches!(&r, Err(k) if k == LOST) {
            self.not_sent(1, LOST);
            return;
        }
        let now = Instant::now();
        let mut s = self.run.borrow_mut();
        s.sent += 1;
        s.last = Some(now);
        let mut generator_late = false;
        let h = s.hists.as_mut().expect("histograms present during a run");
        if let Some(due) = t.due {
            // The generator's own lag runs from the moment the request could
            // go: its send time, or when a stream freed up for it.
            let ready = t.freed.map_or(due, |f| f.max(due));
            let lag = t.sent.saturating_duration_since(ready);
            h.dispatch_lag.saturating_record(nanos(lag));
            generator_late = lag > super::LATE_AFTER;
            if t.freed.is_some() {
                h.queue_delay.saturating_record(nanos(ready - due));
            }
        }
        match r {
            Ok(()) => {
                let rl = nanos(now.saturating_duration_since(t.sent));
                h.request_latency.saturating_record(rl);
                let l = t.due.map_or(rl, |d| nanos(now - d));
                h.latency.saturating_record(l);
                s.succeeded += 1;
            }
            Err(kind) => *s.errors.entry(kind).or_default() += 1,
        }
        if t.due.is_some() {
            if t.freed.is_some() {
                s.late += 1;
            } else {
                s.on_time += 1;
            }
        }
        s.generator_late += u64::from(generator_late);
    }

    /// Open loop: a queued request was not sent within `EXPIRE_AFTER`. Its
    /// latency is at least that, and is recorded as such.
    pub fn expired(&self, due: Instant) {
        let now = Instant::now();
        let mut s = self.run.borrow_mut();
        s.expired += 1;
        let h = s.hists.as_mut().expect("histograms present during a run");
        h.latency.saturating_record(nanos(now - due));
    }

    /// `n` requests that were never handed to a socket, as `kind`: sent
    /// means sent, so a fixed count adds up as sent + not sent.
    pub fn not_sent(&self, n: u64, kind: &str) {
        if n == 0 {
            return;
        }
        let mut s = self.run.borrow_mut();
        *s.not_sent.entry(kind.to_string()).or_default() += n;
    }

    pub fn take_run(&self) -> RunStats {
        std::mem::replace(
            &mut *self.run.borrow_mut(),
            RunStats {
                hists: Some(hist::Hists::new()),
                ..RunStats::default()
            },
        )
    }
}

/// Why a request was not sent: its slot's connection was given up (broke
/// or could not be re-established, `MAX_CONSECUTIVE_CONN_FAILURES` times
/// in a row: the target closed it, stopped accepting, or exited).
pub(crate) const LOST: &str = "connection lost";

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
