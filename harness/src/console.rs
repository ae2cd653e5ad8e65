//! What rig prints, to a reader that may go away: `rig attach … | head -1`
//! closes rig's stdout after one line. `println!` panics on that (a
//! backtrace, and whatever rig was about to do — stop a target, write the
//! `--json` file — undone); here a closed stream ends the printing only:
//! later output to it is dropped, and the command goes on to its end, as
//! ripgrep and hyperfine do.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Write to stdout; a reader that went away (EPIPE), or any other write
/// error (a full disk under a redirect), silences stdout for the rest of
/// the process: printing must not cost a run its results.
pub fn out(args: fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = io::stdout().lock();
    if o.write_fmt(args).is_err() {
        STDOUT_GONE.store(true, Ordering::Relaxed);
    }
}

/// Write bytes to stdout and flush them (for data, e.g. an SVG), with
/// [`out`]'s rule: a reader that went away is not an error.
pub fn out_bytes(b: &[u8]) -> io::Result<()> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut o = io::stdout().lock();
    match o.write_all(b).and_then(|()| o.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            Ok(())
        }
        r => r,
    }
}

/// Write to stderr, with [`out`]'s rule.
pub fn err(args: fmt::Arguments<'_>) {
    if STDERR_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = io::stderr().lock();
    if o.write_fmt(args).is_err() {
        STDERR_GONE.store(true, Ordering::Relaxed);
    }
}

/// Whether stdout's reader went away (a command may stop printing early).
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}

/// `println!` that never panics (see the module).
#[macro_export]
macro_rules! outln {
    () => { $crate::console::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that never panics (see the module).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::out(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics (see the module).
#[macro_export]
macro_rules! errln {
    () => { $crate::console::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::err(format_args!("{}\n", format_args!($($arg)*))) };
}
