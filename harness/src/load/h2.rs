//! HTTP/2 with the `h2` crate: one `H2Conn` per connection (its frame driver
//! is a task on the same thread), `streams` `H2Stream`s sharing it, each with
//! one request in flight. A connection that breaks is re-established once by
//! whichever stream needs it first; the others wait for that handshake.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::conn::{open, Setup, Stats, LOST};
use super::validate::check;
use super::MAX_CONSECUTIVE_CONN_FAILURES;

/// Make one HTTP/2 connection (TCP, TLS when configured, h2 preface and
/// SETTINGS) and start its driver task on this thread.
pub(crate) async fn handshake(
    setup: &Setup,
    stats: &Stats,
) -> Result<(SendRequest<Bytes>, JoinHandle<()>), String> {
    let io = open(setup, stats).await?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .enable_push(false)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| kind("h2", &e))?;
    stats.handshakes.borrow_mut().h2 += 1;
    // Its poll time is request work, not dispatcher spin.
    let driver = tokio::task::spawn_local(super::dispatch::Timed(Box::pin(async move {
        // The error surfaces again on the streams that use the connection.
        let _ = conn.await;
    })));
    Ok((send, driver))
}

fn kind(layer: &str, e: &h2::Error) -> String {
    if let Some(io) = e.get_io() {
        return format!("io: {:?}", io.kind());
    }
    match e.reason() {
        Some(r) if e.is_go_away() => format!("{layer}: goaway {r:?}"),
        Some(r) => format!("{layer}: reset {r:?}"),
        None => format!("{layer}: {e}"),
    }
}

/// A connection shared by the streams of one `H2Conn`.
pub(crate) struct H2Conn {
    setup: Arc<Setup>,
    /// The current connection and its generation.
    current: RefCell<Option<(u64, SendRequest<Bytes>)>>,
    generation: Cell<u64>,
    driver: RefCell<Option<JoinHandle<()>>>,
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
    pub fn new(setup: Arc<Setup>, send: SendRequest<Bytes>, driver: JoinHandle<()>) -> Rc<H2Conn> {
        Rc::new(H2Conn {
            setup,
            current: RefCell::new(Some((1, send))),
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

    /// Close the connection gracefully: with no request handle left the h2
    /// connection sends GOAWAY (NO_ERROR) and closes the socket. True when
    /// it did so within `wait`. Every stream of the connection must have
    /// dropped its handle first ([`H2Stream::release`]).
    pub async fn go_away(&self, wait: std::time::Duration) -> bool {
        *self.current.borrow_mut() = None;
        let Some(driver) = self.driver.borrow_mut().take() else {
            return false;
        };
        let abort = driver.abort_handle();
        match tokio::time::timeout(wait, driver).await {
            Ok(r) => r.is_ok(),
            Err(_) => {
                abort.abort();
                false
            }
        }
    }

    /// The connection of generation `generation` is unusable.
    fn broke(&self, generation: u64) {
        let mut cur = self.current.borrow_mut();
        if cur.as_ref().is_some_and(|(g, _)| *g == generation) {
            *cur = None;
            self.fails.set(self.fails.get() + 1);
            if let Some(d) = self.driver.borrow_mut().take() {
                d.abort();
            }
        }
    }

    /// The current connection, re-established if it broke.
    async fn get(&self, stats: &Stats) -> Result<(u64, SendRequest<Bytes>), String> {
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
                Ok((send, driver)) => {
                    let g = self.generation.get() + 1;
                    self.generation.set(g);
                    *self.current.borrow_mut() = Some((g, send));
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
    /// This stream's handle on the connection, and its generation.
    send: Option<(u64, SendRequest<Bytes>)>,
    body: BytesMut,
    /// When the last request's HEADERS went to the connection (see
    /// `request`).
    pub sent_at: Instant,
}

impl H2Stream {
    pub fn new(conn: Rc<H2Conn>) -> H2Stream {
        H2Stream {
            conn,
            send: None,
            body: BytesMut::new(),
            sent_at: Instant::now(),
        }
    }

    pub fn dead(&self) -> bool {
        self.conn.dead()
    }

    /// Drop this stream's request handle (before [`H2Conn::go_away`]).
    pub fn release(&mut self) -> Rc<H2Conn> {
        self.send = None;
        self.conn.clone()
    }

    pub fn revive(&mut self) {
        self.conn.fails.set(0);
    }

    /// A request was abandoned (timeout): dropping its future reset the
    /// stream; the connection stays.
    pub fn abandon(&mut self) {}

    pub async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        // Retry once when the request never left (the connection had gone
        // away while idle); after it left, a failure is the request's.
        let mut stamped = false;
        for attempt in 0..2 {
            let current = self.conn.generation.get();
            if !matches!(&self.send, Some((g, _)) if *g == current)
                || self.conn.current.borrow().is_none()
            {
                self.send = None;
                self.send = Some(self.conn.get(stats).await?);
            }
            let (generation, send) = self.send.as_mut().expect("set above");
            let generation = *generation;
            if let Err(e) = poll_fn(|cx| send.poll_ready(cx)).await {
                self.conn.broke(generation);
                if attempt == 0 {
                    continue;
                }
                return Err(kind("h2", &e));
            }
            let mut req = http::Request::new(());
            *req.uri_mut() = self.conn.setup.uri.clone();
            if !stamped {
                // The frames are queued for the connection task, which
                // writes them to the socket as soon as this task yields. A
                // retry is the same request.
                self.sent_at = Instant::now();
                stamped = true;
            }
            let response = match send.send_request(req, true) {
                Ok((response, _)) => response,
                Err(e) => {
                    self.conn.broke(generation);
                    if attempt == 0 {
                        continue;
                    }
                    return Err(kind("h2", &e));
                }
            };
            return self.response(response, generation).await;
        }
        unreachable!("the second attempt returns")
    }

    async fn response(
        &mut self,
        response: h2::client::ResponseFuture,
        generation: u64,
    ) -> Result<(), String> {
        let fail = |conn: &H2Conn, e: h2::Error| {
            // A reset of this stream leaves the connection usable.
            if e.is_io() || e.is_go_away() || e.reason().is_none() {
                conn.broke(generation);
            }
            kind("h2", &e)
        };
        let (parts, mut recv) = match response.await {
            Ok(r) => r.into_parts(),
            Err(e) => return Err(fail(&self.conn, e)),
        };
        // One DATA frame is the common case: validate it without a copy.
        let mut first: Option<Bytes> = None;
        self.body.clear();
        while let Some(chunk) = recv.data().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return Err(fail(&self.conn, e)),
            };
            let _ = recv.flow_control().release_capacity(chunk.len());
            match first.take() {
                None if self.body.is_empty() => first = Some(chunk),
                None => self.body.extend_from_slice(&chunk),
                Some(f) => {
                    self.body.extend_from_slice(&f);
                    self.body.extend_from_slice(&chunk);
                }
            }
        }
        self.conn.fails.set(0);
        let body: &[u8] = match &first {
            Some(f) => f,
            None => &self.body,
        };
        let ct = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes());
        check(&self.conn.setup.expect, parts.status.as_u16(), ct, body)
    }
}
