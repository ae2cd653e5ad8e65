//! HTTP/2 written for load generation: one `H2Conn` per connection, its
//! `streams` `H2Stream`s sharing it, each with one request in flight. A
//! connection that breaks is re-established once by whichever stream needs
//! it first; the others wait for that handshake.
//!
//! Why not the `h2` crate: profiled on h2c against nginx (`perf record -e
//! cpu-clock -g` on `loadbench --rig-only --protocols h2c`), half of the
//! generator's user time went to the crate's general machinery (frame
//! buffers split and dropped per frame, HPACK encoding of every request,
//! stream store and per-request handles) and kept rig behind h2load. A
//! load generator sends one fixed request and checks one answer, so it
//! needs much less:
//! - the request's header block is encoded once per client
//!   (`frame::request_block`); sending a request is appending 9 + n bytes
//!   to the connection's write buffer and writing it from the stream's own
//!   task (no wake-up of another task on the way out);
//! - one task per connection (the driver) reads into a fixed buffer and
//!   parses frames in place; response headers are decoded with the
//!   `httlib-hpack` decoder (every header block, so that its dynamic table
//!   follows the server's), the body validated where it lies when one DATA
//!   frame carries it all (copied otherwise), and the stream's task woken
//!   with the verdict.
//!
//! What HTTP/2 asks of a client is kept: SETTINGS are acknowledged (the
//! server's MAX_CONCURRENT_STREAMS is obeyed), PINGs answered, receive
//! windows given back with WINDOW_UPDATE (1 MiB per stream, 16 MiB per
//! connection, returned at half), a RST_STREAM fails its stream only, a
//! GOAWAY fails the streams above its last stream id (they were not
//! processed: retried once on a new connection) and lets the others finish,
//! and `H2Conn::go_away` sends GOAWAY (NO_ERROR) and closes.

mod frame;
#[cfg(test)]
mod tests;

pub(crate) use frame::request_block;

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::conn::{open, Io, Setup, Stats, LOST};
use super::validate::check;
use super::MAX_CONSECUTIVE_CONN_FAILURES;

/// Receive windows, per stream and per connection.
const STREAM_WINDOW: u32 = 1 << 20;
const CONN_WINDOW: u32 = 1 << 24;
/// The window both sides start with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
/// Room for several frames per read; never less than one whole frame.
const READ_BUF: usize = 64 * 1024;

/// Make one HTTP/2 connection (TCP, TLS when configured, preface and
/// SETTINGS both ways) and start its driver task on this thread.
pub(crate) async fn handshake(
    setup: &Arc<Setup>,
    stats: &Stats,
) -> Result<(Shared, JoinHandle<bool>), String> {
    let io = open(setup, stats).await?;
    let mut p = Proto::new(setup.clone());
    p.wbuf.extend_from_slice(frame::PREFACE);
    frame::settings(&mut p.wbuf, STREAM_WINDOW);
    frame::window_update(&mut p.wbuf, 0, CONN_WINDOW - DEFAULT_WINDOW);
    let wire = Rc::new(RefCell::new(Wire {
        io,
        rbuf: vec![0; READ_BUF].into_boxed_slice(),
        rstart: 0,
        rend: 0,
        p,
    }));
    let w = wire.clone();
    // Its poll time is request work, not dispatcher spin.
    let driver = tokio::task::spawn_local(super::dispatch::Timed(Box::pin(async move {
        poll_fn(|cx| w.borrow_mut().poll_drive(cx)).await
    })));
    // The server's SETTINGS come first: a server that does not speak h2
    // fails here, not on the first request.
    let settled = poll_fn(|cx| {
        let mut w = wire.borrow_mut();
        if let Some(k) = &w.p.broken {
            return Poll::Ready(Err(k.clone()));
        }
        if w.p.settled {
            return Poll::Ready(Ok(()));
        }
        w.p.waiters.push(cx.waker().clone());
        Poll::Pending
    });
    let secs = setup.request_timeout.as_secs_f64();
    let late = |at_deadline| match at_deadline {
        true => format!("h2: cut at the {}", super::DEADLINE),
        false => format!("h2: no SETTINGS from the server within {secs} s"),
    };
    if let Err(k) = super::conn::bounded(setup, settled, late).await {
        driver.abort();
        return Err(k);
    }
    stats.handshakes.borrow_mut().h2 += 1;
    Ok((wire, driver))
}

/// One connection's socket and protocol state, shared by its driver task
/// and its streams (one thread: `Rc<RefCell>`; no borrow is held across an
/// await).
pub(crate) type Shared = Rc<RefCell<Wire>>;

pub(crate) struct Wire {
    io: Io,
    rbuf: Box<[u8]>,
    /// Unparsed bytes are `rbuf[rstart..rend]`.
    rstart: usize,
    rend: usize,
    p: Proto,
}

/// How a request ended.
#[derive(Debug)]
struct Outcome {
    result: Result<(), String>,
    /// The connection is unusable for new requests.
    conn: bool,
    /// The server did not process it (GOAWAY below its id, REFUSED_STREAM):
    /// safe to send again.
    refused: bool,
}

/// One stream slot's request.
#[derive(Default)]
struct Pending {
    /// Its stream id; 0: none in flight.
    stream: u32,
    /// 0 until the final response HEADERS.
    status: u16,
    /// The final response's `content-type`, when it had one.
    content_type: Vec<u8>,
    has_type: bool,
    body: Vec<u8>,
    /// DATA bytes of this stream not yet given back by WINDOW_UPDATE.
    unacked: u32,
    done: Option<Outcome>,
    waker: Option<Waker>,
}

/// Everything but the socket and the read buffer, so that frames can be
/// handled while they still lie in that buffer.
struct Proto {
    setup: Arc<Setup>,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` already handed to the socket.
    wpos: usize,
    decoder: httlib_hpack::Decoder<'static>,
    /// A header block being assembled (HEADERS, then CONTINUATION).
    block: Vec<u8>,
    block_stream: u32,
    block_end_stream: bool,
    fields: Vec<(Vec<u8>, Vec<u8>, u8)>,
    slots: Vec<Pending>,
    /// (stream id, slot) of every request in flight.
    in_flight: Vec<(u32, usize)>,
    next_id: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS.
    max_streams: u32,
    conn_unacked: u32,
    /// The server's SETTINGS arrived.
    settled: bool,
    /// The server's GOAWAY: its last stream id.
    goaway: Option<u32>,
    /// The connection failed: the error kind of what was in flight.
    broken: Option<String>,
    /// `H2Conn::go_away` asked the driver to close.
    closing: bool,
    goaway_sent: bool,
    driver: Option<Waker>,
    /// Tasks waiting for SETTINGS or for a stream under the server's limit.
    waiters: Vec<Waker>,
}

impl Proto {
    fn new(setup: Arc<Setup>) -> Proto {
        let slots = (0..setup.streams).map(|_| Pending::default()).collect();
        Proto {
            setup,
            wbuf: Vec::with_capacity(4096),
            wpos: 0,
            decoder: httlib_hpack::Decoder::default(),
            block: Vec::new(),
            block_stream: 0,
            block_end_stream: false,
            fields: Vec::new(),
            slots,
            in_flight: Vec::new(),
            next_id: 1,
            max_streams: u32::MAX,
            conn_unacked: 0,
            settled: false,
            goaway: None,
            broken: None,
            closing: false,
            goaway_sent: false,
            driver: None,
            waiters: Vec::new(),
        }
    }

    fn wake_waiters(&mut self) {
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }

    fn wake_driver(&self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    fn slot_of(&self, stream: u32) -> Option<usize> {
        self.in_flight
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|&(_, i)| i)
    }

    /// End slot `i`'s request.
    fn finish(&mut self, i: usize, o: Outcome) {
        let s = &mut self.slots[i];
        if let Some(at) = self.in_flight.iter().position(|&(id, _)| id == s.stream) {
            self.in_flight.swap_remove(at);
        }
        s.stream = 0;
        s.done = Some(o);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        self.wake_waiters();
    }

    /// Slot `i`'s response is complete: validate it (`body`: the whole body
    /// where it lies, else the slot's copy).
    fn complete(&mut self, i: usize, body: Option<&[u8]>) {
        let s = &self.slots[i];
        let result = check(
            &self.setup.expect,
            s.status,
            s.has_type.then_some(&s.content_type[..]),
            body.unwrap_or(&s.body),
        );
        self.finish(
            i,
            Outcome {
                result,
                conn: false,
                refused: false,
            },
        );
    }

    /// The connection failed: every request in flight fails with `kind`.
    fn fail(&mut self, kind: String) {
        if self.broken.is_some() {
            return;
        }
        while let Some(&(_, i)) = self.in_flight.last() {
            self.finish(
                i,
                Outcome {
                    result: Err(kind.clone()),
                    conn: true,
                    refused: false,
                },
            );
        }
        self.broken = Some(kind);
        self.wake_waiters();
    }

    /// Forget slot `i`'s request, if one is still in flight (it was
    /// abandoned), and tell the server.
    fn cancel(&mut self, i: usize) {
        let id = self.slots[i].stream;
        if id == 0 {
            return;
        }
        if let Some(at) = self.in_flight.iter().position(|&(s, _)| s == id) {
            self.in_flight.swap_remove(at);
        }
        let s = &mut self.slots[i];
        s.stream = 0;
        s.done = None;
        s.waker = None;
        if self.broken.is_none() {
            frame::rst_stream(&mut self.wbuf, id, frame::CANCEL);
            self.wake_driver();
        }
        self.wake_waiters();
    }

    /// Handle one frame; `Err`: a connection error.
    fn frame(&mut self, h: frame::Head, b: &[u8]) -> Result<(), String> {
        if self.block_stream != 0 && h.kind != frame::CONTINUATION {
            return Err("h2: PROTOCOL_ERROR (a header block was cut)".into());
        }
        match h.kind {
            frame::DATA => self.data(&h, b),
            frame::HEADERS => {
                let frag = frame::unpad(&h, b).ok_or("h2: PROTOCOL_ERROR (bad padding)")?;
                self.block.clear();
                self.block.extend_from_slice(frag);
                let end_stream = h.flags & frame::END_STREAM != 0;
                if h.flags & frame::END_HEADERS != 0 {
                    self.headers(h.stream, end_stream)
                } else {
                    self.block_stream = h.stream;
                    self.block_end_stream = end_stream;
                    Ok(())
                }
            }
            frame::CONTINUATION => {
                if h.stream == 0 || h.stream != self.block_stream {
                    return Err("h2: PROTOCOL_ERROR (stray CONTINUATION)".into());
                }
                self.block.extend_from_slice(b);
                if h.flags & frame::END_HEADERS != 0 {
                    self.block_stream = 0;
                    self.headers(h.stream, self.block_end_stream)
                } else {
                    Ok(())
                }
            }
            frame::RST_STREAM => {
                let code = be32(b).ok_or("h2: FRAME_SIZE_ERROR (RST_STREAM)")?;
                if let Some(i) = self.slot_of(h.stream) {
                    let refused = code == frame::REFUSED_STREAM;
                    self.finish(
                        i,
                        Outcome {
                            result: Err(format!("h2: reset {}", frame::reason(code))),
                            conn: false,
                            refused,
                        },
                    );
                }
                Ok(())
            }
            frame::SETTINGS => self.settings(&h, b),
            frame::PING => {
                if b.len() != 8 {
                    return Err("h2: FRAME_SIZE_ERROR (PING)".into());
                }
                if h.flags & frame::ACK == 0 {
                    frame::ping_ack(&mut self.wbuf, b);
                }
                Ok(())
            }
            frame::GOAWAY => {
                let last = be32(b).ok_or("h2: FRAME_SIZE_ERROR (GOAWAY)")? & MAX_STREAM_ID;
                let code = b.get(4..8).and_then(be32).unwrap_or(0);
                self.goaway = Some(last);
                let kind = format!("h2: goaway {}", frame::reason(code));
                while let Some(&(_, i)) = self.in_flight.iter().find(|(id, _)| *id > last) {
                    self.finish(
                        i,
                        Outcome {
                            result: Err(kind.clone()),
                            conn: true,
                            refused: true,
                        },
                    );
                }
                self.wake_waiters();
                Ok(())
            }
            frame::PUSH_PROMISE => Err("h2: PROTOCOL_ERROR (push, which was disabled)".into()),
            // WINDOW_UPDATE: the client sends no DATA. PRIORITY and unknown
            // types: nothing to do.
            _ => Ok(()),
        }
    }

    fn settings(&mut self, h: &frame::Head, b: &[u8]) -> Result<(), String> {
        if h.flags & frame::ACK != 0 {
            return Ok(());
        }
        if h.stream != 0 || !b.len().is_multiple_of(6) {
            return Err("h2: FRAME_SIZE_ERROR (SETTINGS)".into());
        }
        for s in b.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.max_streams = v,
                frame::SETTINGS_INITIAL_WINDOW_SIZE if v > MAX_STREAM_ID => {
                    return Err("h2: FLOW_CONTROL_ERROR (SETTINGS)".into())
                }
                // The header table size bounds the client's encoder, which
                // never indexes; the rest concern what the client does not
                // send (DATA, push) or sizes it stays far below.
                _ => {}
            }
        }
        frame::settings_ack(&mut self.wbuf);
        self.settled = true;
        self.wake_waiters();
        Ok(())
    }

    /// A complete header block of `stream`.
    fn headers(&mut self, stream: u32, end_stream: bool) -> Result<(), String> {
        // Decoded even for a stream no longer followed (abandoned), so that
        // the dynamic table stays in step with the server's.
        self.fields.clear();
        self.decoder
            .decode(&mut self.block, &mut self.fields)
            .map_err(|e| format!("h2: COMPRESSION_ERROR ({e:?})"))?;
        let Some(i) = self.slot_of(stream) else {
            return Ok(());
        };
        let s = &mut self.slots[i];
        if s.status == 0 {
            let mut status = 0;
            s.content_type.clear();
            s.has_type = false;
            for (name, value, _) in &self.fields {
                match name.as_slice() {
                    b":status" => status = parse_status(value).unwrap_or(0),
                    b"content-type" => {
                        s.content_type.extend_from_slice(value);
                        s.has_type = true;
                    }
                    _ => {}
                }
            }
            if status == 0 {
                self.finish(i, protocol_error("no :status"));
                return Ok(());
            }
            if status < 200 {
                // Informational: the final response follows.
                if end_stream {
                    self.finish(i, protocol_error("stream ended on a 1xx"));
                }
                return Ok(());
            }
            s.status = status;
        }
        // Otherwise trailers: nothing in them is checked.
        if end_stream {
            self.complete(i, None);
        }
        Ok(())
    }

    fn data(&mut self, h: &frame::Head, b: &[u8]) -> Result<(), String> {
        let data = frame::unpad(h, b).ok_or("h2: PROTOCOL_ERROR (bad padding)")?;
        // Padding counts against the windows too.
        let n = b.len() as u32;
        self.conn_unacked += n;
        if self.conn_unacked >= CONN_WINDOW / 2 {
            frame::window_update(&mut self.wbuf, 0, self.conn_unacked);
            self.conn_unacked = 0;
        }
        let Some(i) = self.slot_of(h.stream) else {
            return Ok(());
        };
        let s = &mut self.slots[i];
        if s.status == 0 {
            self.finish(i, protocol_error("DATA before HEADERS"));
            return Ok(());
        }
        if h.flags & frame::END_STREAM != 0 {
            if s.body.is_empty() {
                self.complete(i, Some(data));
            } else {
                s.body.extend_from_slice(data);
                self.complete(i, None);
            }
            return Ok(());
        }
        s.body.extend_from_slice(data);
        s.unacked += n;
        if s.unacked >= STREAM_WINDOW / 2 {
            frame::window_update(&mut self.wbuf, h.stream, s.unacked);
            s.unacked = 0;
        }
        Ok(())
    }
}

fn protocol_error(why: &str) -> Outcome {
    Outcome {
        result: Err(format!("h2: PROTOCOL_ERROR ({why})")),
        conn: false,
        refused: false,
    }
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

fn parse_status(v: &[u8]) -> Option<u16> {
    if v.len() != 3 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0')))
}

/// Store `cx`'s waker unless the one stored already wakes the same task.
fn keep_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        *slot = Some(cx.waker().clone());
    }
}

fn io_kind(e: &std::io::Error) -> String {
    format!("io: {:?}", e.kind())
}

impl Wire {
    /// Hand the write buffer to the socket. `Ok(true)`: all of it.
    fn flush(&mut self, cx: &mut Context<'_>) -> Result<bool, String> {
        let p = &mut self.p;
        while p.wpos < p.wbuf.len() {
            match Pin::new(&mut self.io).poll_write(cx, &p.wbuf[p.wpos..]) {
                Poll::Ready(Ok(0)) => return Err("io: WriteZero".into()),
                Poll::Ready(Ok(n)) => p.wpos += n,
                Poll::Ready(Err(e)) => return Err(io_kind(&e)),
                Poll::Pending => return Ok(false),
            }
        }
        p.wbuf.clear();
        p.wpos = 0;
        // TLS: the records still buffered in the session.
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Ready(Ok(())) => Ok(true),
            Poll::Ready(Err(e)) => Err(io_kind(&e)),
            Poll::Pending => Ok(false),
        }
    }

    /// The driver: write what is queued, read and handle frames, until the
    /// connection fails, drains after a GOAWAY, or closes on request.
    /// `true`: it closed on request, having sent its GOAWAY.
    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        keep_waker(&mut self.p.driver, cx);
        loop {
            if self.p.broken.is_some() {
                return Poll::Ready(false);
            }
            if self.p.closing && !self.p.goaway_sent {
                frame::goaway(&mut self.p.wbuf, 0, frame::NO_ERROR);
                self.p.goaway_sent = true;
            }
            let flushed = match self.flush(cx) {
                Ok(f) => f,
                Err(k) => {
                    self.p.fail(k);
                    return Poll::Ready(false);
                }
            };
            if self.p.goaway_sent {
                if !flushed {
                    return Poll::Pending;
                }
                return match Pin::new(&mut self.io).poll_shutdown(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(r) => {
                        self.p.fail("h2: closed".into());
                        Poll::Ready(r.is_ok())
                    }
                };
            }
            // The server said goodbye and every request it took is done.
            if self.p.goaway.is_some() && self.p.in_flight.is_empty() && flushed {
                return Poll::Ready(false);
            }
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
            } else if self.rbuf.len() - self.rend < frame::HEAD + frame::MAX_FRAME {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            let mut rb = ReadBuf::new(&mut self.rbuf[self.rend..]);
            match Pin::new(&mut self.io).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    self.p.fail(io_kind(&e));
                    return Poll::Ready(false);
                }
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        self.p.fail("io: closed".into());
                        return Poll::Ready(false);
                    }
                    self.rend += n;
                }
            }
            if let Err(k) = self.frames() {
                // Tell the server why, best effort, and stop.
                frame::goaway(&mut self.p.wbuf, 0, 0x1);
                let _ = self.flush(cx);
                self.p.fail(k);
                return Poll::Ready(false);
            }
        }
    }

    /// Handle every complete frame in the read buffer.
    fn frames(&mut self) -> Result<(), String> {
        while self.rend - self.rstart >= frame::HEAD {
            let h = frame::Head::parse(&self.rbuf[self.rstart..]);
            if h.len > frame::MAX_FRAME {
                return Err("h2: FRAME_SIZE_ERROR".into());
            }
            let end = self.rstart + frame::HEAD + h.len;
            if end > self.rend {
                break;
            }
            self.p
                .frame(h, &self.rbuf[self.rstart + frame::HEAD..end])?;
            self.rstart = end;
        }
        Ok(())
    }

    /// Send slot `i`'s request, stamping `sent_at` just before its bytes go
    /// to the socket. Waits for the server's SETTINGS and for a stream under
    /// its limit. `Err`: the connection takes no new stream (the request
    /// did not leave).
    fn poll_start(
        &mut self,
        i: usize,
        cx: &mut Context<'_>,
        sent_at: &mut Option<Instant>,
    ) -> Poll<Result<(), String>> {
        let p = &mut self.p;
        if let Some(k) = &p.broken {
            return Poll::Ready(Err(k.clone()));
        }
        if p.next_id > MAX_STREAM_ID {
            // Stream ids used up: drain like after a GOAWAY, so that the
            // driver ends once the last request is done.
            p.goaway.get_or_insert(MAX_STREAM_ID);
            p.wake_driver();
        }
        if p.goaway.is_some() || p.closing {
            return Poll::Ready(Err("h2: connection going away".into()));
        }
        p.cancel(i);
        if !p.settled || p.in_flight.len() >= p.max_streams as usize {
            p.waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        let id = p.next_id;
        p.next_id += 2;
        frame::request(&mut p.wbuf, id, &p.setup.h2_block);
        let s = &mut p.slots[i];
        s.stream = id;
        s.status = 0;
        s.body.clear();
        s.unacked = 0;
        s.done = None;
        p.in_flight.push((id, i));
        sent_at.get_or_insert_with(Instant::now);
        match self.flush(cx) {
            Ok(true) => {}
            // The driver finishes the write when the socket takes it.
            Ok(false) => self.p.wake_driver(),
            Err(k) => {
                self.p.fail(k);
                self.p.wake_driver();
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_done(&mut self, i: usize, cx: &mut Context<'_>) -> Poll<Outcome> {
        let s = &mut self.p.slots[i];
        match s.done.take() {
            Some(o) => Poll::Ready(o),
            None => {
                keep_waker(&mut s.waker, cx);
                Poll::Pending
            }
        }
    }
}

/// A connection shared by the streams of one `H2Conn`.
pub(crate) struct H2Conn {
    setup: Arc<Setup>,
    /// The current connection and its generation.
    current: RefCell<Option<(u64, Shared)>>,
    generation: Cell<u64>,
    driver: RefCell<Option<JoinHandle<bool>>>,
    connecting: Cell<bool>,
    connected: Notify,
    fails: Cell<u32>,
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        if let Some(d) = self.driver.get_mut().take() {
            d.abort();
        }
    }
}

impl H2Conn {
    pub fn new(setup: Arc<Setup>, wire: Shared, driver: JoinHandle<bool>) -> Rc<H2Conn> {
        Rc::new(H2Conn {
            setup,
            current: RefCell::new(Some((1, wire))),
            generation: Cell::new(1),
            driver: RefCell::new(Some(driver)),
            connecting: Cell::new(false),
            connected: Notify::new(),
            fails: Cell::new(0),
        })
    }

    fn dead(&self) -> bool {
        self.fails.get() >= MAX_CONSECUTIVE_CONN_FAILURES
    }

    /// Close the connection gracefully: send GOAWAY (NO_ERROR) and close the
    /// socket. True when it did so within `wait`. Every stream of the
    /// connection must have released it first ([`H2Stream::release`]).
    pub async fn go_away(&self, wait: Duration) -> bool {
        let current = self.current.borrow_mut().take();
        let Some(driver) = self.driver.borrow_mut().take() else {
            return false;
        };
        let abort = driver.abort_handle();
        if let Some((_, wire)) = current {
            let mut w = wire.borrow_mut();
            w.p.closing = true;
            w.p.wake_driver();
        }
        match tokio::time::timeout(wait, driver).await {
            Ok(r) => r.unwrap_or(false),
            Err(_) => {
                abort.abort();
                false
            }
        }
    }

    /// The connection of generation `generation` takes no new requests: the
    /// next one makes a new connection. The old one's driver ends by itself
    /// once it has failed or its requests are done.
    fn broke(&self, generation: u64) {
        let mut cur = self.current.borrow_mut();
        if cur.as_ref().is_some_and(|(g, _)| *g == generation) {
            *cur = None;
            self.fails.set(self.fails.get() + 1);
            // Detached: it drains what the old connection still owes.
            self.driver.borrow_mut().take();
        }
    }

    /// The current connection, re-established if it broke.
    async fn get(&self, stats: &Stats) -> Result<(u64, Shared), String> {
        loop {
            if let Some((g, s)) = self.current.borrow().as_ref() {
                return Ok((*g, s.clone()));
            }
            if self.dead() {
                return Err(LOST.into());
            }
            if self.connecting.get() {
                self.connected.notified().await;
                continue;
            }
            self.connecting.set(true);
            let r = handshake(&self.setup, stats).await;
            self.connecting.set(false);
            self.connected.notify_waiters();
            match r {
                Ok((wire, driver)) => {
                    let g = self.generation.get() + 1;
                    self.generation.set(g);
                    *self.current.borrow_mut() = Some((g, wire));
                    *self.driver.borrow_mut() = Some(driver);
                }
                Err(kind) => {
                    self.fails.set(self.fails.get() + 1);
                    return Err(kind);
                }
            }
        }
    }
}

/// One stream slot: one request at a time on a shared connection.
pub(crate) struct H2Stream {
    conn: Rc<H2Conn>,
    /// This stream's slot in every connection of `conn`.
    index: usize,
    /// The connection this stream last used, and its generation.
    wire: Option<(u64, Shared)>,
    /// When the last request's HEADERS were handed to the socket.
    pub sent_at: Instant,
}

impl H2Stream {
    pub fn new(conn: Rc<H2Conn>, index: usize) -> H2Stream {
        H2Stream {
            conn,
            index,
            wire: None,
            sent_at: Instant::now(),
        }
    }

    pub fn dead(&self) -> bool {
        self.conn.dead()
    }

    pub fn setup(&self) -> &Setup {
        &self.conn.setup
    }

    pub fn setup_arc(&self) -> Arc<Setup> {
        self.conn.setup.clone()
    }

    /// Let go of the connection (before [`H2Conn::go_away`]).
    pub fn release(&mut self) -> Rc<H2Conn> {
        self.wire = None;
        self.conn.clone()
    }

    pub fn revive(&mut self) {
        self.conn.fails.set(0);
    }

    /// A request was abandoned (timeout): its stream is reset; the
    /// connection stays.
    pub fn abandon(&mut self) {
        if let Some((_, w)) = &self.wire {
            w.borrow_mut().p.cancel(self.index);
        }
    }

    pub async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        // Retry once when the request never left (the connection had gone
        // away while idle) or the server refused it unprocessed; after it
        // was processed, a failure is the request's. A retry is the same
        // request: `sent_at` keeps its first stamp.
        let mut sent_at = None;
        for attempt in 0..2 {
            let current = self.conn.generation.get();
            if !matches!(&self.wire, Some((g, _)) if *g == current)
                || self.conn.current.borrow().is_none()
            {
                self.wire = None;
                self.wire = Some(self.conn.get(stats).await?);
            }
            let (generation, wire) = self.wire.clone().expect("set above");
            let i = self.index;
            let started = poll_fn(|cx| wire.borrow_mut().poll_start(i, cx, &mut sent_at)).await;
            if let Some(t) = sent_at {
                self.sent_at = t;
            }
            if let Err(kind) = started {
                self.conn.broke(generation);
                if attempt == 0 {
                    continue;
                }
                return Err(kind);
            }
            let o = poll_fn(|cx| wire.borrow_mut().poll_done(i, cx)).await;
            if o.conn {
                self.conn.broke(generation);
            } else {
                self.conn.fails.set(0);
            }
            if o.refused && attempt == 0 {
                continue;
            }
            return o.result;
        }
        unreachable!("the second attempt returns")
    }
}
