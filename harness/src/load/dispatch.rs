//! On-time dispatch for the open loop: sleep until shortly before a send
//! time, then spin to it, and account for the spinning.
//!
//! A sleeping thread on this kind of machine wakes tens of µs late (a 1 ms
//! timerfd sleep wakes ~44 µs late at p50 on the VM rig was built on), and
//! that lateness would be charged to the server as latency. So the
//! dispatcher sleeps (a timerfd in the runtime's epoll set) until
//! `spin window` before the send time and then spins. The spin yields to
//! the runtime on every turn while more than `FINE` remains, so responses
//! that arrive meanwhile are read at once instead of waiting for the spin
//! to end, and busy-waits only for the last few µs.
//!
//! The spin window comes from `calibrate`: the wake-up lateness of this
//! thread's own timer, measured at start (p99 plus a margin), unless the
//! user gives one. Spin time is counted apart from work time: the spin's
//! wall time less the time request tasks ran inside it (`Timed` futures add
//! their poll time to a per-thread counter).

use std::cell::Cell;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;

/// Below this much time to go the spin stops yielding to the runtime (one
/// turn of the runtime costs a few µs: an `epoll_wait` with no timeout and
/// whatever tasks are ready).
const FINE: Duration = Duration::from_micros(4);
/// Bounds of a calibrated spin window.
const MIN_SPIN: Duration = Duration::from_micros(20);
const MAX_SPIN: Duration = Duration::from_micros(200);
/// Calibration: this many sleeps of `CALIBRATION_SLEEP` each.
const CALIBRATION_SAMPLES: usize = 200;
const CALIBRATION_SLEEP: Duration = Duration::from_micros(200);

/// How the dispatcher of one generator thread waits for send times.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DispatchFacts {
    /// Spin this long before each send time.
    pub spin_window_ns: u64,
    /// `calibrated` (from `wake_*`) or `given` (by the user).
    pub spin_source: SpinSource,
    /// Measured lateness of this thread's timer wake-ups: `CALIBRATION_SAMPLES`
    /// sleeps of `CALIBRATION_SLEEP` (0 when the window was given).
    pub wake_p50_ns: u64,
    pub wake_p99_ns: u64,
    pub wake_max_ns: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SpinSource {
    #[default]
    Calibrated,
    Given,
}

impl DispatchFacts {
    pub fn spin_window(&self) -> Duration {
        Duration::from_nanos(self.spin_window_ns)
    }

    pub fn given(spin: Duration) -> DispatchFacts {
        DispatchFacts {
            spin_window_ns: spin.as_nanos() as u64,
            spin_source: SpinSource::Given,
            ..DispatchFacts::default()
        }
    }
}

/// Measure how late this thread's timer wakes it, and choose the spin
/// window: the p99 lateness plus half of it, within [`MIN_SPIN`, `MAX_SPIN`].
/// Takes about `CALIBRATION_SAMPLES × (CALIBRATION_SLEEP + lateness)`
/// (~50 ms). Runs on the runtime of the thread it is for.
pub(crate) async fn calibrate(ticker: &mut Ticker) -> DispatchFacts {
    let mut late: Vec<u64> = Vec::with_capacity(CALIBRATION_SAMPLES);
    for _ in 0..CALIBRATION_SAMPLES {
        let due = Instant::now() + CALIBRATION_SLEEP;
        ticker.sleep_until(due).await;
        late.push(Instant::now().saturating_duration_since(due).as_nanos() as u64);
    }
    facts_from(late)
}

fn facts_from(mut late: Vec<u64>) -> DispatchFacts {
    late.sort_unstable();
    let q = |p: f64| late[((late.len() - 1) as f64 * p).round() as usize];
    let (p50, p99, max) = (q(0.5), q(0.99), q(1.0));
    let spin = Duration::from_nanos(p99 + p99 / 2).clamp(MIN_SPIN, MAX_SPIN);
    DispatchFacts {
        spin_window_ns: spin.as_nanos() as u64,
        spin_source: SpinSource::Calibrated,
        wake_p50_ns: p50,
        wake_p99_ns: p99,
        wake_max_ns: max,
    }
}

/// Calibrate on a new thread pinned to `cpu` (for a manifest, before any
/// client exists).
pub fn calibrate_on(cpu: Option<usize>) -> Result<DispatchFacts, String> {
    std::thread::spawn(move || {
        prepare_thread(cpu)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        rt.block_on(async {
            let mut t = Ticker::new().map_err(|e| format!("timerfd: {e}"))?;
            Ok(calibrate(&mut t).await)
        })
    })
    .join()
    .map_err(|_| "calibration thread panicked".to_string())?
}

thread_local! {
    /// Wall time request tasks of this thread spent being polled.
    static BUSY_NS: Cell<u64> = const { Cell::new(0) };
}

fn busy_ns() -> u64 {
    BUSY_NS.with(Cell::get)
}

/// A future whose poll time counts as work (see `wait_until`).
pub(crate) struct Timed<F>(pub Pin<Box<F>>);

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let t0 = Instant::now();
        let r = self.0.as_mut().poll(cx);
        let d = t0.elapsed().as_nanos() as u64;
        BUSY_NS.with(|b| b.set(b.get() + d));
        r
    }
}

/// Wait until `due`: sleep on the timer until `spin` before it, then spin.
/// Returns the spin time that was not request work.
pub(crate) async fn wait_until(due: Instant, spin: Duration, ticker: Option<&mut Ticker>) -> u64 {
    // Let tasks spawned for the last send write their request first.
    tokio::task::yield_now().await;
    let wake = due.checked_sub(spin).unwrap_or(due);
    if Instant::now() < wake {
        match ticker {
            Some(t) => t.sleep_until(wake).await,
            None => tokio::time::sleep_until(wake.into()).await,
        }
    }
    let t0 = Instant::now();
    if t0 >= due {
        return 0;
    }
    let busy0 = busy_ns();
    loop {
        let now = Instant::now();
        if now >= due {
            break;
        }
        if due - now > FINE {
            tokio::task::yield_now().await;
        } else {
            std::hint::spin_loop();
        }
    }
    let wall = t0.elapsed().as_nanos() as u64;
    wall.saturating_sub(busy_ns() - busy0)
}

/// Pin the calling thread to `cpu` and make its timer sleeps exact.
pub(crate) fn prepare_thread(cpu: Option<usize>) -> Result<(), String> {
    if let Some(cpu) = cpu {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(format!("CPU {cpu} is out of range"));
        }
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays in
        // bounds (checked above); sched_setaffinity reads the set we own.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc != 0 {
            return Err(format!(
                "pinning to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    // Sleeps of this thread (the runtime's epoll timeouts) end on time
    // instead of up to 50 µs late.
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    Ok(())
}

/// CPU time of the calling thread.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanosecond-precise sleeps for the open-loop schedule (tokio's timer
/// rounds up to whole milliseconds): a timerfd in the runtime's epoll set.
pub(crate) struct Ticker {
    fd: AsyncFd<OwnedFd>,
}

impl Ticker {
    pub fn new() -> std::io::Result<Ticker> {
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the OwnedFd stays open and is the same descriptor for as
        // long as the AsyncFd owns it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Ticker { fd })
    }

    pub async fn sleep_until(&mut self, t: Instant) {
        let d = t.saturating_duration_since(Instant::now());
        if d.is_zero() {
            return;
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: valid fd and itimerspec; old value not requested.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } != 0 {
            tokio::time::sleep_until(t.into()).await;
            return;
        }
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                tokio::time::sleep_until(t.into()).await;
                return;
            };
            let mut expirations = 0u64;
            // SAFETY: reading 8 bytes into a u64 we own.
            let n = unsafe {
                libc::read(
                    fd,
                    (&mut expirations as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            // Drained (or spurious): wait for the next edge either way.
            guard.clear_ready();
            if n == 8 {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_window_is_the_p99_wake_up_lateness_and_a_half_within_bounds() {
        let late: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        let f = facts_from(late);
        assert_eq!(
            (f.wake_p50_ns, f.wake_p99_ns, f.wake_max_ns),
            (51_000, 99_000, 100_000)
        );
        assert_eq!(f.spin_window_ns, 148_500);
        assert_eq!(facts_from(vec![10; 5]).spin_window(), MIN_SPIN);
        assert_eq!(facts_from(vec![9_000_000; 5]).spin_window(), MAX_SPIN);
    }
}
