//! Long-lived connections: TCP echo, WebSocket echo, server-sent events.
//!
//! In: a [`LiveSpec`] (address, protocol, connections, the cycle's number,
//! how long to hold, how often to send). Out: a [`LiveOutcome`]: when each
//! phase began (connecting, connected, closing, disconnected) and one
//! [`ConnLedger`] per connection.
//!
//! Every connection runs on ONE thread's tokio runtime (current-thread), so
//! thousands of them cost the generator one core at most. The phases are
//! barriers: every connection is open (or has failed) before any is held,
//! and every hold is over before any closes, so a sample of the server taken
//! inside a phase sees only that phase.
//!
//! Echoes are checked end to end: each message names its cycle, its
//! connection and its sequence number (`c2 n17 s5`), and the echo must be
//! the same bytes. A TCP connection counts as open once its message 0 came
//! back (the server accepted it); the hold's messages are 1, 2, …. An SSE connection must get an event at once and then
//! heartbeats; every event after the first counts as one.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// How long one connection may take to open (and, for SSE, to send its
/// first event), an echo to come back, or a close to be answered.
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the connections speak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveKind {
    /// Newline-terminated messages on a raw TCP connection.
    Tcp,
    /// Text messages on a WebSocket opened on `path`.
    Ws { path: String },
    /// `GET path` answered with `text/event-stream`.
    Sse { path: String },
}

#[derive(Clone, Debug)]
pub struct LiveSpec {
    pub addr: SocketAddr,
    pub kind: LiveKind,
    pub connections: usize,
    /// 1-based; carried in every message.
    pub cycle: u32,
    pub hold: Duration,
    /// TCP and WebSocket: time between one connection's messages.
    pub message_every: Duration,
}

/// One connection's account of its cycle.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ConnLedger {
    /// The connection opened (and, for SSE, its first event came).
    pub connected: bool,
    pub sent: u64,
    /// Echoes that came back equal to what was sent.
    pub echoed: u64,
    /// SSE: events after the first.
    pub heartbeats: u64,
    /// The close completed: the server answered it (TCP: end of stream
    /// after ours; WebSocket: its close frame), within [`LIVE_TIMEOUT`].
    pub reclaimed: bool,
    /// The first thing that went wrong on this connection.
    pub error: Option<String>,
}

/// When each phase began; `disconnected` is when the last close completed.
#[derive(Clone, Copy, Debug)]
pub struct PhaseTimes {
    pub connecting: Instant,
    pub connected: Instant,
    pub closing: Instant,
    pub disconnected: Instant,
}

#[derive(Clone, Debug)]
pub struct LiveOutcome {
    pub times: PhaseTimes,
    pub conns: Vec<ConnLedger>,
    /// CPU time of the generator's thread over the cycle.
    pub client_cpu_ns: u64,
}

impl LiveOutcome {
    /// Connection errors by message, for a short report.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for e in self.conns.iter().filter_map(|c| c.error.as_ref()) {
            *m.entry(e.clone()).or_insert(0) += 1;
        }
        m
    }
}

/// Where the generator waits for the caller: once every connection is
/// open (before the hold) and once every hold is over (before the close),
/// it says which (`"connected"`, `"held"`) on `at` and waits for `go`. No
/// connection sends anything meanwhile, so a window the caller opens and
/// closes there holds the hold's messages and nothing else of the client's.
pub struct Pause {
    pub at: std::sync::mpsc::Sender<&'static str>,
    pub go: std::sync::mpsc::Receiver<()>,
}

impl Pause {
    fn wait(&self, at: &'static str) {
        // A caller that went away lets the cycle run on.
        if self.at.send(at).is_ok() {
            let _ = self.go.recv();
        }
    }
}

/// A cycle running on its own thread, so the caller can sample the server
/// meanwhile.
pub struct LiveRun(JoinHandle<io::Result<LiveOutcome>>);

impl LiveRun {
    pub fn start(spec: LiveSpec, pause: Option<Pause>) -> io::Result<LiveRun> {
        let h = std::thread::Builder::new()
            .name("rig-live".into())
            .spawn(move || run(&spec, pause.as_ref()))?;
        Ok(LiveRun(h))
    }

    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    pub fn join(self) -> io::Result<LiveOutcome> {
        self.0
            .join()
            .map_err(|_| io::Error::other("the live generator thread panicked"))?
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One cycle, on the calling thread.
pub fn run(spec: &LiveSpec, pause: Option<&Pause>) -> io::Result<LiveOutcome> {
    let cpu0 = thread_cpu_ns();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (times, conns) = rt.block_on(cycle(spec, pause));
    Ok(LiveOutcome {
        times,
        conns,
        client_cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
    })
}

/// A connection between phases.
enum Open {
    Tcp(BufReader<OwnedReadHalf>, OwnedWriteHalf),
    Ws(Box<WebSocketStream<TcpStream>>),
    Sse(TcpStream, SseReader),
}

async fn cycle(spec: &LiveSpec, pause: Option<&Pause>) -> (PhaseTimes, Vec<ConnLedger>) {
    let n = spec.connections;
    let connecting = Instant::now();
    let mut set = JoinSet::new();
    for i in 0..n {
        let (addr, kind, cycle) = (spec.addr, spec.kind.clone(), spec.cycle);
        set.spawn(async move {
            (
                i,
                tokio::time::timeout(LIVE_TIMEOUT, open(addr, &kind, cycle, i)).await,
            )
        });
    }
    let mut ledgers = vec![ConnLedger::default(); n];
    let mut opened: Vec<Option<Open>> = (0..n).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, r) = r.expect("a connection task panicked");
        match r {
            Ok(Ok(o)) => {
                ledgers[i].connected = true;
                opened[i] = Some(o);
            }
            Ok(Err(e)) => ledgers[i].error = Some(format!("connect: {e}")),
            Err(_) => ledgers[i].error = Some(format!("connect: no answer in {LIVE_TIMEOUT:?}")),
        }
    }
    // Blocking the runtime's one thread is the point: nothing runs.
    if let Some(p) = pause {
        p.wait("connected");
    }
    let connected = Instant::now();
    let until = tokio::time::Instant::from_std(connected + spec.hold);
    let mut set = JoinSet::new();
    for (i, o) in opened.into_iter().enumerate() {
        let Some(o) = o else { continue };
        // Spread the connections' first messages over one interval, so
        // the server sees a steady stream rather than bursts. Send times
        // are scheduled from the phase's start, not from when a task runs:
        // every connection sends exactly the messages whose times fall in
        // the hold (hold / interval of them when the hold is a multiple).
        let first = tokio::time::Instant::from_std(connected)
            + spec.message_every.mul_f64(i as f64 / n as f64);
        let (cycle, every) = (spec.cycle, spec.message_every);
        set.spawn(async move {
            let mut l = ConnLedger::default();
            let o = hold(o, &mut l, cycle, i, first, every, until).await;
            (i, l, o)
        });
    }
    let mut held: Vec<(usize, Open)> = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        let (i, l, o) = r.expect("a hold task panicked");
        let g = &mut ledgers[i];
        g.sent = l.sent;
        g.echoed = l.echoed;
        g.heartbeats = l.heartbeats;
        if g.error.is_none() {
            g.error = l.error;
        }
        held.extend(o.map(|o| (i, o)));
    }
    if let Some(p) = pause {
        p.wait("held");
    }
    let closing = Instant::now();
    let mut set = JoinSet::new();
    for (i, o) in held {
        set.spawn(async move { (i, tokio::time::timeout(LIVE_TIMEOUT, close(o)).await) });
    }
    while let Some(r) = set.join_next().await {
        let (i, r) = r.expect("a close task panicked");
        match r {
            Ok(Ok(())) => ledgers[i].reclaimed = true,
            Ok(Err(e)) => {
                ledgers[i].error.get_or_insert(format!("close: {e}"));
            }
            Err(_) => {
                ledgers[i]
                    .error
                    .get_or_insert(format!("close: not answered in {LIVE_TIMEOUT:?}"));
            }
        }
    }
    let times = PhaseTimes {
        connecting,
        connected,
        closing,
        disconnected: Instant::now(),
    };
    (times, ledgers)
}

async fn open(addr: SocketAddr, kind: &LiveKind, cycle: u32, conn: usize) -> Result<Open, String> {
    let s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    match kind {
        LiveKind::Tcp => {
            // A TCP connection is open for the client before the server
            // has accepted it; its first message (sequence 0, not counted
            // in the hold's) coming back proves the server holds it, as
            // the handshake does for WebSocket and SSE.
            let (r, w) = s.into_split();
            let mut o = Open::Tcp(BufReader::new(r), w);
            let hello = message(cycle, conn, 0);
            let back = echo(&mut o, &hello).await?;
            if back != hello {
                return Err(format!("wrong echo: sent `{hello}`, got `{back}`"));
            }
            Ok(o)
        }
        LiveKind::Ws { path } => {
            let url = format!("ws://{addr}{path}");
            let (ws, _) = tokio_tungstenite::client_async(url, s)
                .await
                .map_err(|e| format!("WebSocket handshake: {e}"))?;
            Ok(Open::Ws(Box::new(ws)))
        }
        LiveKind::Sse { path } => {
            let mut s = s;
            let req =
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut r = SseReader::default();
            r.head(&mut s).await?;
            // The first event, at once: proof the stream is live.
            r.event(&mut s).await?;
            Ok(Open::Sse(s, r))
        }
    }
}

/// The message `i`'s connection sends `seq`-th in `cycle`.
pub fn message(cycle: u32, conn: usize, seq: u64) -> String {
    format!("c{cycle} n{conn} s{seq}")
}

/// Hold one connection until `until`: send and check echoes, or count
/// heartbeats. `None` when the connection broke (its error is in `l`).
async fn hold(
    o: Open,
    l: &mut ConnLedger,
    cycle: u32,
    conn: usize,
    first: tokio::time::Instant,
    every: Duration,
    until: tokio::time::Instant,
) -> Option<Open> {
    match o {
        Open::Sse(mut s, mut r) => loop {
            match tokio::time::timeout_at(until, r.event(&mut s)).await {
                Err(_) => return Some(Open::Sse(s, r)),
                Ok(Ok(())) => l.heartbeats += 1,
                Ok(Err(e)) => {
                    l.error = Some(format!("hold: {e}"));
                    return None;
                }
            }
        },
        mut o => {
            let mut next = first;
            let mut seq = 0u64;
            while next < until {
                tokio::time::sleep_until(next).await;
                seq += 1;
                let m = message(cycle, conn, seq);
                l.sent += 1;
                let got = tokio::time::timeout(LIVE_TIMEOUT, echo(&mut o, &m)).await;
                match got {
                    Ok(Ok(back)) if back == m => l.echoed += 1,
                    Ok(Ok(back)) => {
                        l.error = Some(format!("wrong echo: sent `{m}`, got `{back}`"));
                        return Some(o);
                    }
                    Ok(Err(e)) => {
                        l.error = Some(format!("hold: {e}"));
                        return None;
                    }
                    Err(_) => {
                        l.error = Some(format!("hold: no echo of `{m}` in {LIVE_TIMEOUT:?}"));
                        return None;
                    }
                }
                next += every;
            }
            Some(o)
        }
    }
}

/// Send `m` and read what comes back.
async fn echo(o: &mut Open, m: &str) -> Result<String, String> {
    match o {
        Open::Tcp(r, w) => {
            let line = format!("{m}\n");
            w.write_all(line.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut back = String::new();
            if r.read_line(&mut back).await.map_err(|e| e.to_string())? == 0 {
                return Err("the server closed the connection".into());
            }
            Ok(back.trim_end_matches('\n').to_string())
        }
        Open::Ws(ws) => {
            ws.send(Message::text(m)).await.map_err(|e| e.to_string())?;
            loop {
                match ws.next().await {
                    None => return Err("the server closed the WebSocket".into()),
                    Some(Err(e)) => return Err(e.to_string()),
                    Some(Ok(Message::Text(t))) => return Ok(t.as_str().to_string()),
                    Some(Ok(Message::Binary(b))) => {
                        return Ok(String::from_utf8_lossy(&b).into_owned())
                    }
                    Some(Ok(Message::Close(_))) => {
                        return Err("the server closed the WebSocket".into())
                    }
                    Some(Ok(_)) => continue,
                }
            }
        }
        Open::Sse(..) => unreachable!("SSE connections send nothing"),
    }
}

/// Close one connection and wait for the server's side of the close.
async fn close(o: Open) -> Result<(), String> {
    match o {
        Open::Tcp(mut r, mut w) => {
            w.shutdown().await.map_err(|e| e.to_string())?;
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.map_err(|e| e.to_string())?;
            Ok(())
        }
        Open::Ws(mut ws) => {
            WebSocketStream::close(&mut ws, None)
                .await
                .map_err(|e| e.to_string())?;
            // Until the server's close frame and the end of the stream.
            while let Some(m) = ws.next().await {
                if let Err(e) = m {
                    use tokio_tungstenite::tungstenite::Error;
                    return match e {
                        Error::ConnectionClosed | Error::AlreadyClosed => Ok(()),
                        e => Err(e.to_string()),
                    };
                }
            }
            Ok(())
        }
        // The client ends an event stream by closing: the server learns of
        // it when it next writes, which the server's descriptors show.
        Open::Sse(s, _) => {
            drop(s);
            Ok(())
        }
    }
}

/// An HTTP/1.1 response read by hand: the head, then events out of the
/// (chunked or close-delimited) body.
#[derive(Default)]
pub struct SseReader {
    raw: Vec<u8>,
    chunked: bool,
    /// Chunked: bytes left in the current chunk.
    left: usize,
    /// The decoded body not yet split into events.
    body: Vec<u8>,
}

impl SseReader {
    async fn fill(&mut self, s: &mut TcpStream) -> Result<(), String> {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the event stream".into());
        }
        self.raw.extend_from_slice(&buf[..n]);
        Ok(())
    }

    async fn head(&mut self, s: &mut TcpStream) -> Result<(), String> {
        let end = loop {
            if let Some(p) = find(&self.raw, b"\r\n\r\n") {
                break p;
            }
            if self.raw.len() > 64 * 1024 {
                return Err("a response head over 64 KiB".into());
            }
            self.fill(s).await?;
        };
        let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
        self.raw.drain(..end + 4);
        let status = head.split_whitespace().nth(1).unwrap_or("");
        if status != "200" {
            return Err(format!(
                "status {status}, not 200: `{}`",
                head.lines().next().unwrap_or("")
            ));
        }
        if !head
            .lines()
            .any(|l| l.starts_with("content-type:") && l.contains("text/event-stream"))
        {
            return Err("the response is not text/event-stream".into());
        }
        self.chunked = head
            .lines()
            .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
        self.decode()
    }

    /// Move what `raw` holds of the body into `body`.
    fn decode(&mut self) -> Result<(), String> {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return Ok(());
        }
        loop {
            if self.left > 0 {
                let take = self.left.min(self.raw.len());
                self.body.extend(self.raw.drain(..take));
                self.left -= take;
                if self.left > 0 {
                    return Ok(());
                }
                // The chunk's trailing CRLF: consumed with the next size line.
            }
            let Some(eol) = find(&self.raw, b"\r\n") else {
                return Ok(());
            };
            let line = String::from_utf8_lossy(&self.raw[..eol]).into_owned();
            if line.is_empty() {
                self.raw.drain(..2);
                continue;
            }
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("a bad chunk size line `{line}`"))?;
            if size == 0 {
                return Err("the server ended the event stream".into());
            }
            self.raw.drain(..eol + 2);
            self.left = size;
        }
    }

    /// Wait for the next whole event (a block ended by a blank line).
    pub async fn event(&mut self, s: &mut TcpStream) -> Result<(), String> {
        loop {
            // CRLF line ends become LF, so one blank-line search fits both.
            if self.body.contains(&b'\r') {
                self.body.retain(|&b| b != b'\r');
            }
            if let Some(p) = find(&self.body, b"\n\n") {
                self.body.drain(..p + 2);
                return Ok(());
            }
            self.fill(s).await?;
            self.decode()?;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_events_decode_across_chunk_boundaries() {
        let mut r = SseReader {
            chunked: true,
            ..Default::default()
        };
        r.raw = b"1c\r\nevent: open\ndata: rig-peer\n\n\r\n5\r\nevent\r\n".to_vec();
        r.decode().unwrap();
        assert_eq!(r.body, b"event: open\ndata: rig-peer\n\nevent".to_vec());
        assert!(r.raw.is_empty());
        r.raw = b"5\r\n: x\n\n\r\n0\r\n\r\n".to_vec();
        assert_eq!(r.decode().unwrap_err(), "the server ended the event stream");
        assert_eq!(
            r.body,
            b"event: open\ndata: rig-peer\n\nevent: x\n\n".to_vec()
        );
    }

    #[test]
    fn a_message_names_its_cycle_connection_and_sequence() {
        assert_eq!(message(2, 17, 5), "c2 n17 s5");
    }
}
