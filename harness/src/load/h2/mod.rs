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
mod proto;
#[cfg(test)]
mod tests;

use proto::{Outcome, Proto};

pub(crate) use frame::request_block;

use std::cell::RefCell;
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

use super::conn::{open, Io, Setup, Stats};
use super::generations::Generations;

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
    wires: Generations<Shared>,
    /// The current connection's driver task.
    driver: RefCell<Option<JoinHandle<bool>>>,
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
            wires: Generations::new(wire),
            driver: RefCell::new(Some(driver)),
        })
    }

    fn dead(&self) -> bool {
        self.wires.dead()
    }

    /// Close the connection gracefully: send GOAWAY (NO_ERROR) and close the
    /// socket. True when it did so within `wait`. Every stream of the
    /// connection must have released it first ([`H2Stream::release`]).
    pub async fn go_away(&self, wait: Duration) -> bool {
        let current = self.wires.take();
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
        if self.wires.broke(generation) {
            // Detached: it drains what the old connection still owes.
            self.driver.borrow_mut().take();
        }
    }

    /// The current connection, re-established if it broke.
    async fn get(&self, stats: &Stats) -> Result<(u64, Shared), String> {
        let connect = || async {
            let (wire, driver) = handshake(&self.setup, stats).await?;
            *self.driver.borrow_mut() = Some(driver);
            Ok(wire)
        };
        self.wires.get(|_| true, connect).await
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
        self.conn.wires.succeeded();
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
            if self
                .wire
                .as_ref()
                .is_none_or(|(g, _)| self.conn.wires.stale(*g))
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
                self.conn.wires.succeeded();
            }
            if o.refused && attempt == 0 {
                continue;
            }
            return o.result;
        }
        unreachable!("the second attempt returns")
    }
}
