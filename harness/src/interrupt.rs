//! SIGINT, SIGTERM and SIGHUP, obeyed at once by every command.
//!
//! The CLI installs the handlers once ([`install`]). From then on a signal
//! sets one process-wide flag, and a watcher thread stops every target rig
//! launched (which ends any load aimed at it). The stages poll
//! [`requested`] where they loop: the load generators stop sending, a
//! launch refuses to start a new target, and the commands write what they
//! have, marked interrupted, and exit 130.
//!
//! SIGHUP (a closed terminal or SSH session) is one of them: a run whose
//! terminal went away still writes its report. A second signal, while rig
//! is still writing what it has, ends rig at once (130), after stopping
//! the targets it started: the way out of any wait that would not end.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// The signals that arrived, and the last one.
static COUNT: AtomicUsize = AtomicUsize::new(0);
static LAST: AtomicUsize = AtomicUsize::new(0);

/// The signals rig obeys this way.
pub const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Install the handlers (once; later calls return the same flag) and a
/// watcher that runs `on_signal` when a signal arrives (the CLI passes the
/// stop-every-target clean-up; this module stays a leaf that stages can
/// poll without importing the launcher).
pub fn install(on_signal: fn()) -> std::io::Result<Arc<AtomicBool>> {
    if let Some(f) = FLAG.get() {
        return Ok(Arc::clone(f));
    }
    let flag = Arc::new(AtomicBool::new(false));
    for sig in SIGNALS {
        // SAFETY: the action only stores to atomics, which is
        // async-signal-safe; it runs before the flag is set below.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                LAST.store(sig as usize, Ordering::SeqCst);
                COUNT.fetch_add(1, Ordering::SeqCst);
            })?;
        }
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    let flag = Arc::clone(FLAG.get_or_init(|| flag));
    let watch = Arc::clone(&flag);
    std::thread::Builder::new()
        .name("rig-signals".into())
        .spawn(move || {
            while !watch.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            on_signal();
            while COUNT.load(Ordering::SeqCst) < 2 {
                std::thread::sleep(Duration::from_millis(20));
            }
            crate::errln!(
                "rig: {} again: exiting now, without writing what was left",
                signal_name()
            );
            on_signal();
            std::process::exit(crate::exit::INTERRUPTED);
        })?;
    Ok(flag)
}

/// A SIGINT/SIGTERM/SIGHUP arrived (only ever true after [`install`]).
pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// The name of the signal that interrupted rig (`"SIGINT"`, `"SIGTERM"`,
/// `"SIGHUP"`), or `"a signal"` before any arrived.
pub fn signal_name() -> &'static str {
    match LAST.load(Ordering::SeqCst) as i32 {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// "interrupted by SIGHUP": what a report says of work a signal cut.
pub fn interrupted_by() -> String {
    format!("interrupted by {}", signal_name())
}
