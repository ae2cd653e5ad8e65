//! A connection that streams share and that is made again when it breaks,
//! as HTTP/2 and HTTP/3 keep theirs. Each connection made gets the next
//! generation, so a stream that saw generation g fail breaks g only, never
//! the connection made after it; one stream makes the next connection while
//! the others wait for it; and consecutive failures past
//! `MAX_CONSECUTIVE_CONN_FAILURES` end it (every stream then fails as
//! `LOST`).

use std::cell::{Cell, RefCell};
use std::future::Future;

use tokio::sync::Notify;

use super::conn::LOST;
use super::MAX_CONSECUTIVE_CONN_FAILURES;

pub(crate) struct Generations<T> {
    /// The current connection and its generation; `None` once it broke.
    current: RefCell<Option<(u64, T)>>,
    generation: Cell<u64>,
    connecting: Cell<bool>,
    connected: Notify,
    fails: Cell<u32>,
}

impl<T: Clone> Generations<T> {
    /// The first connection, made by the client's handshake before any load.
    pub fn new(first: T) -> Generations<T> {
        Generations {
            current: RefCell::new(Some((1, first))),
            generation: Cell::new(1),
            connecting: Cell::new(false),
            connected: Notify::new(),
            fails: Cell::new(0),
        }
    }

    /// Too many consecutive failures: no connection is made again.
    pub fn dead(&self) -> bool {
        self.fails.get() >= MAX_CONSECUTIVE_CONN_FAILURES
    }

    /// A request succeeded (or the client revives the connection): the
    /// failures are no longer consecutive.
    pub fn succeeded(&self) {
        self.fails.set(0);
    }

    /// Whether a stream holding generation `g` must get the connection
    /// again: a newer one was made, or the current one broke.
    pub fn stale(&self, g: u64) -> bool {
        g != self.generation.get() || self.current.borrow().is_none()
    }

    /// The current connection, taken (to close it).
    pub fn take(&self) -> Option<(u64, T)> {
        self.current.borrow_mut().take()
    }

    /// Generation `g` takes no new requests; the next request makes a new
    /// connection. True when `g` was the current one (a failure counted).
    pub fn broke(&self, g: u64) -> bool {
        let mut cur = self.current.borrow_mut();
        if cur.as_ref().is_some_and(|(c, _)| *c == g) {
            *cur = None;
            self.fails.set(self.fails.get() + 1);
            return true;
        }
        false
    }

    /// The current connection, or one made again by `connect` if it broke
    /// or `usable` says it can take no request (closed while idle).
    pub async fn get<F>(
        &self,
        usable: impl Fn(&T) -> bool,
        connect: impl Fn() -> F,
    ) -> Result<(u64, T), String>
    where
        F: Future<Output = Result<T, String>>,
    {
        loop {
            // The borrow ends with this statement: `broke` borrows mutably.
            let current = self.current.borrow().clone();
            match current {
                Some((g, c)) if usable(&c) => return Ok((g, c)),
                Some((g, _)) => {
                    self.broke(g);
                }
                None => {}
            }
            if self.dead() {
                return Err(LOST.into());
            }
            if self.connecting.get() {
                self.connected.notified().await;
                continue;
            }
            self.connecting.set(true);
            let r = connect().await;
            self.connecting.set(false);
            self.connected.notify_waiters();
            match r {
                Ok(c) => {
                    let g = self.generation.get() + 1;
                    self.generation.set(g);
                    *self.current.borrow_mut() = Some((g, c));
                }
                Err(kind) => {
                    self.fails.set(self.fails.get() + 1);
                    return Err(kind);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_stale_generation_breaks_nothing_and_failures_in_a_row_end_it() {
        let c = Generations::new("first");
        // Generation 1 breaks; the next get makes generation 2.
        assert!(c.broke(1));
        assert!(c.stale(1));
        let (g, s) = block_on(c.get(|_| true, || async { Ok("second") })).unwrap();
        assert_eq!((g, s), (2, "second"));
        // A stream that still held generation 1 reports it broken: the
        // connection made after it stays.
        assert!(!c.broke(1));
        assert!(!c.stale(2));
        // One failure was counted; a success clears it.
        c.succeeded();
        // Closed while idle: made again before the request.
        let (g, _) = block_on(c.get(|s| *s != "second", || async { Ok("third") })).unwrap();
        assert_eq!(g, 3);
        // That close counted as a failure; a request on the new one succeeds.
        assert!(!c.dead());
        c.succeeded();
        // Two failures in a row: the connection is lost for good.
        assert!(c.broke(3));
        let e = block_on(c.get(|_| true, || async { Err("refused".to_string()) }));
        assert_eq!(e, Err("refused".to_string()));
        assert!(c.dead());
        let e = block_on(c.get(|_| true, || async { Ok("never") }));
        assert_eq!(e, Err(LOST.to_string()));
    }
}
