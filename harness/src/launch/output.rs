//! The target's stdout and stderr: drained by a thread per pipe (the target
//! never blocks on a full pipe), the last bytes kept for error messages,
//! and the readiness line (`ready = { stdout = "..." }`) flagged.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The last `cap` bytes written to one of the target's pipes.
#[derive(Debug)]
pub struct OutputTail {
    inner: Mutex<TailState>,
    eof: Condvar,
    pub(super) matched: AtomicBool,
}

#[derive(Debug, Default)]
struct TailState {
    buf: VecDeque<u8>,
    total: u64,
    eof: bool,
}

/// Bytes kept per stream: enough for a panic message with a backtrace.
pub const TAIL_BYTES: usize = 64 * 1024;

impl OutputTail {
    pub(super) fn new() -> Arc<OutputTail> {
        Arc::new(OutputTail {
            inner: Mutex::new(TailState::default()),
            eof: Condvar::new(),
            matched: AtomicBool::new(false),
        })
    }

    pub(super) fn push(&self, data: &[u8]) {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(TAIL_BYTES)..];
        let excess = (s.buf.len() + data.len()).saturating_sub(TAIL_BYTES);
        s.buf.drain(..excess);
        s.buf.extend(data);
    }

    /// The kept bytes, lossily decoded, with control characters escaped
    /// (see [`printable`]): the text goes into messages rig prints.
    pub fn text(&self) -> String {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = s.buf.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        printable(&String::from_utf8_lossy(&v))
    }

    /// Total bytes ever written (the tail may hold fewer).
    pub fn total_bytes(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// Wait until the pipe is closed (every writer exited), at most `t`.
    pub(super) fn wait_eof(&self, t: Duration) {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.eof.wait_timeout_while(s, t, |s| !s.eof);
    }
}

/// `s` with every control character but newline and tab written as an
/// escape (`\x1b`, `\u{9b}`): a target's output printed in rig's
/// messages cannot move the cursor, retitle or clear the terminal.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if (0x80..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// Drain `r` into `tail` until EOF; flag the first line containing
/// `pattern`. A draining thread per pipe keeps the target from ever blocking
/// on a full pipe.
pub(super) fn drain(
    mut r: impl Read + Send + 'static,
    tail: Arc<OutputTail>,
    pattern: Option<String>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        let mut line: Vec<u8> = Vec::new();
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    tail.push(&buf[..n]);
                    if let Some(p) = &pattern {
                        for &c in &buf[..n] {
                            if c == b'\n' {
                                if String::from_utf8_lossy(&line).contains(p.as_str()) {
                                    tail.matched.store(true, Ordering::Release);
                                }
                                line.clear();
                            } else if line.len() < TAIL_BYTES {
                                line.push(c);
                            }
                        }
                    }
                }
            }
        }
        let mut s = tail.inner.lock().unwrap_or_else(|e| e.into_inner());
        s.eof = true;
        tail.eof.notify_all();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_escape_sequences_come_back_escaped() {
        let t = OutputTail::new();
        t.push(b"\x1b]0;title\x07\x1b[2J\x1b[31mred\x1b[0m\r\nnext\tline\x7f\n");
        t.push("\u{9b}2J".as_bytes());
        assert_eq!(
            t.text(),
            "\\x1b]0;title\\x07\\x1b[2J\\x1b[31mred\\x1b[0m\\x0d\nnext\tline\\x7f\n\\u{9b}2J"
        );
    }

    #[test]
    fn tail_keeps_the_last_bytes() {
        let t = OutputTail::new();
        t.push(&vec![b'a'; TAIL_BYTES]);
        t.push(b"end");
        let s = t.text();
        assert_eq!(s.len(), TAIL_BYTES);
        assert!(s.ends_with("aend"));
        assert_eq!(t.total_bytes(), TAIL_BYTES as u64 + 3);
        t.push(&vec![b'b'; TAIL_BYTES + 10]);
        assert_eq!(t.text(), "b".repeat(TAIL_BYTES));
    }
}
