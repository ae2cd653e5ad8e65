//! SIGINT/SIGTERM, obeyed at once by every command.
//!
//! The CLI installs the handlers once ([`install`]). From then on a signal
//! sets one process-wide flag, and a watcher thread stops every target rig
//! launched (which ends any load aimed at it). The stages poll
//! [`requested`] where they loop: the load generators stop sending, a
//! launch refuses to start a new target, and the commands write what they
//! have, marked interrupted, and exit 130.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Install the handlers (once; later calls return the same flag) and a
/// watcher that runs `on_signal` when a signal arrives (the CLI passes the
/// stop-every-target clean-up; this module stays a leaf that stages can
/// poll without importing the launcher).
pub fn install(on_signal: fn()) -> std::io::Result<Arc<AtomicBool>> {
    if let Some(f) = FLAG.get() {
        return Ok(Arc::clone(f));
    }
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
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
        })?;
    Ok(flag)
}

/// A SIGINT/SIGTERM arrived (only ever true after [`install`]).
pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}
