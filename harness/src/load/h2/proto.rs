//! The client side of HTTP/2's frame state machine, apart from its I/O:
//! every frame the server sends changes the connection's and its streams'
//! state here (SETTINGS obeyed and acknowledged, PINGs answered, windows
//! given back, RST_STREAM and GOAWAY failing what they name) and fills the
//! write buffer; `Wire` moves the bytes.

use std::sync::Arc;
use std::task::Waker;

use super::frame;
use super::{CONN_WINDOW, MAX_STREAM_ID, STREAM_WINDOW};
use crate::load::conn::Setup;
use crate::load::validate::check;

/// How a request ended.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) result: Result<(), String>,
    /// The connection is unusable for new requests.
    pub(super) conn: bool,
    /// The server did not process it (GOAWAY below its id, REFUSED_STREAM):
    /// safe to send again.
    pub(super) refused: bool,
}

/// One stream slot's request.
#[derive(Default)]
pub(super) struct Pending {
    /// Its stream id; 0: none in flight.
    pub(super) stream: u32,
    /// 0 until the final response HEADERS.
    pub(super) status: u16,
    /// The final response's `content-type`, when it had one.
    pub(super) content_type: Vec<u8>,
    pub(super) has_type: bool,
    pub(super) body: Vec<u8>,
    /// DATA bytes of this stream not yet given back by WINDOW_UPDATE.
    pub(super) unacked: u32,
    pub(super) done: Option<Outcome>,
    pub(super) waker: Option<Waker>,
}

/// Everything but the socket and the read buffer, so that frames can be
/// handled while they still lie in that buffer.
pub(super) struct Proto {
    pub(super) setup: Arc<Setup>,
    pub(super) wbuf: Vec<u8>,
    /// Bytes of `wbuf` already handed to the socket.
    pub(super) wpos: usize,
    pub(super) decoder: httlib_hpack::Decoder<'static>,
    /// A header block being assembled (HEADERS, then CONTINUATION).
    pub(super) block: Vec<u8>,
    pub(super) block_stream: u32,
    pub(super) block_end_stream: bool,
    pub(super) fields: Vec<(Vec<u8>, Vec<u8>, u8)>,
    pub(super) slots: Vec<Pending>,
    /// (stream id, slot) of every request in flight.
    pub(super) in_flight: Vec<(u32, usize)>,
    pub(super) next_id: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS.
    pub(super) max_streams: u32,
    pub(super) conn_unacked: u32,
    /// The server's SETTINGS arrived.
    pub(super) settled: bool,
    /// The server's GOAWAY: its last stream id.
    pub(super) goaway: Option<u32>,
    /// The connection failed: the error kind of what was in flight.
    pub(super) broken: Option<String>,
    /// `H2Conn::go_away` asked the driver to close.
    pub(super) closing: bool,
    pub(super) goaway_sent: bool,
    pub(super) driver: Option<Waker>,
    /// Tasks waiting for SETTINGS or for a stream under the server's limit.
    pub(super) waiters: Vec<Waker>,
}

impl Proto {
    pub(super) fn new(setup: Arc<Setup>) -> Proto {
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

    pub(super) fn wake_waiters(&mut self) {
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }

    pub(super) fn wake_driver(&self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    pub(super) fn slot_of(&self, stream: u32) -> Option<usize> {
        self.in_flight
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|&(_, i)| i)
    }

    /// End slot `i`'s request.
    pub(super) fn finish(&mut self, i: usize, o: Outcome) {
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
    pub(super) fn complete(&mut self, i: usize, body: Option<&[u8]>) {
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
    pub(super) fn fail(&mut self, kind: String) {
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
    pub(super) fn cancel(&mut self, i: usize) {
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
    pub(super) fn frame(&mut self, h: frame::Head, b: &[u8]) -> Result<(), String> {
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

    pub(super) fn settings(&mut self, h: &frame::Head, b: &[u8]) -> Result<(), String> {
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
    pub(super) fn headers(&mut self, stream: u32, end_stream: bool) -> Result<(), String> {
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

    pub(super) fn data(&mut self, h: &frame::Head, b: &[u8]) -> Result<(), String> {
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

pub(super) fn protocol_error(why: &str) -> Outcome {
    Outcome {
        result: Err(format!("h2: PROTOCOL_ERROR ({why})")),
        conn: false,
        refused: false,
    }
}

pub(super) fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

pub(super) fn parse_status(v: &[u8]) -> Option<u16> {
    if v.len() != 3 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0')))
}
