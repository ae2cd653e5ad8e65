//! One generator thread: pinned, a current-thread tokio runtime with a
//! `LocalSet`, its share of the connections (kept across runs), and a loop
//! that runs jobs from the `Client` and hands back a `ThreadReport`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc as tmpsc;

use super::conn::{RunStats, Setup, Stats};
use super::h1::{H1Conn, H1Slot};
use super::h2::{handshake, H2Conn, H2Stream};
use super::hist::{summarize, Hists};
use super::schedule::{decide, Decision, Schedule};
use super::{conn, Handshakes, LoadError, LoadReport, Mode, EXPIRE_AFTER, REQUEST_TIMEOUT};

pub(crate) enum Plan {
    /// Requests per slot of this thread.
    Fixed(Vec<u64>),
    /// Stop sending at this instant.
    Closed(Instant),
    Open(Schedule),
}

pub(crate) struct Job {
    pub start: Instant,
    pub plan: Plan,
}

/// One thread's part of a run.
#[derive(Default)]
pub(crate) struct ThreadReport {
    pub run: RunStats,
    pub handshakes: Handshakes,
    pub cpu_ns: u64,
}

impl ThreadReport {
    pub fn merge(&mut self, o: ThreadReport) {
        let (a, b) = (&mut self.run, o.run);
        a.scheduled += b.scheduled;
        a.sent += b.sent;
        a.succeeded += b.succeeded;
        for (k, v) in b.errors {
            *a.errors.entry(k).or_default() += v;
        }
        a.dropped_capacity += b.dropped_capacity;
        a.expired += b.expired;
        match (&mut a.hists, &b.hists) {
            (Some(x), Some(y)) => x.merge(y),
            (None, Some(_)) => a.hists = b.hists,
            _ => {}
        }
        a.last = a.last.max(b.last);
        self.handshakes.add(o.handshakes);
        self.cpu_ns += o.cpu_ns;
    }

    pub fn into_report(self, mode: Mode, start: Instant) -> LoadReport {
        let r = self.run;
        let hists = r.hists.unwrap_or_else(Hists::new);
        let elapsed = r
            .last
            .map_or(Duration::ZERO, |l| l.saturating_duration_since(start));
        let elapsed = match &mode {
            // A closed or open window lasts at least its duration.
            Mode::Closed { duration } | Mode::Open { duration, .. } => elapsed.max(*duration),
            Mode::FixedCount { .. } => elapsed,
        };
        let elapsed_ns = elapsed.as_nanos() as u64;
        let rps = if elapsed_ns == 0 {
            0.0
        } else {
            r.succeeded as f64 / elapsed.as_secs_f64()
        };
        LoadReport {
            mode,
            elapsed_ns,
            scheduled: r.scheduled,
            sent: r.sent,
            succeeded: r.succeeded,
            errors: r.errors,
            dropped_capacity: r.dropped_capacity,
            expired: r.expired,
            latency: summarize(&hists.latency),
            request_latency: summarize(&hists.request_latency),
            dispatch_lag: summarize(&hists.dispatch_lag),
            histogram: hists.encode(),
            handshakes: self.handshakes,
            client_cpu_ns: self.cpu_ns,
            rps,
        }
    }
}

pub(crate) struct Worker {
    index: usize,
    jobs: tmpsc::UnboundedSender<Job>,
    reports: mpsc::Receiver<ThreadReport>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A worker whose connections are being made.
pub(crate) struct Starting {
    worker: Worker,
    ready: mpsc::Receiver<Result<Handshakes, LoadError>>,
}

impl Starting {
    pub fn ready(self) -> Result<(Worker, Handshakes), LoadError> {
        let index = self.worker.index;
        match self.ready.recv() {
            Ok(Ok(h)) => Ok((self.worker, h)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(LoadError::Thread {
                index,
                why: "exited while connecting".into(),
            }),
        }
    }
}

impl Worker {
    pub fn start(
        index: usize,
        cpu: Option<usize>,
        setup: Arc<Setup>,
        connections: Vec<usize>,
    ) -> Result<Starting, LoadError> {
        let (jobs, mut job_rx) = tmpsc::unbounded_channel::<Job>();
        let (report_tx, reports) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("rig-load-{index}"))
            .spawn(move || {
                if let Err(why) = prepare_thread(cpu) {
                    let _ = ready_tx.send(Err(LoadError::Thread { index, why }));
                    return;
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let why = format!("tokio runtime: {e}");
                        let _ = ready_tx.send(Err(LoadError::Thread { index, why }));
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let stats = Rc::new(Stats::new());
                    let mut slots = match connect_all(&setup, &connections, &stats).await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(*stats.handshakes.borrow()));
                    let mut ticker = Ticker::new().ok();
                    while let Some(job) = job_rx.recv().await {
                        let r = run_job(&mut slots, job, &stats, ticker.as_mut()).await;
                        if report_tx.send(r).is_err() {
                            break;
                        }
                    }
                });
            })
            .map_err(|e| LoadError::Thread {
                index,
                why: format!("spawn: {e}"),
            })?;
        Ok(Starting {
            worker: Worker {
                index,
                jobs,
                reports,
                thread: Some(thread),
            },
            ready,
        })
    }

    pub fn send(&self, job: Job) {
        // A worker that has gone away reports an empty run in `wait`.
        let _ = self.jobs.send(job);
    }

    pub fn wait(&self) -> ThreadReport {
        self.reports.recv().unwrap_or_default()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the job channel ends the thread's loop; its connections
        // close with it.
        let (closed, _) = tmpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn prepare_thread(cpu: Option<usize>) -> Result<(), String> {
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

/// One request stream of this thread.
enum Slot {
    H1(H1Slot),
    H2(H2Stream),
}

impl Slot {
    fn dead(&self) -> bool {
        match self {
            Slot::H1(s) => s.dead(),
            Slot::H2(s) => s.dead(),
        }
    }

    fn revive(&mut self) {
        match self {
            Slot::H1(s) => s.revive(),
            Slot::H2(s) => s.revive(),
        }
    }

    /// One request, validated, bounded by `REQUEST_TIMEOUT`.
    async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        let r = match self {
            Slot::H1(s) => tokio::time::timeout(REQUEST_TIMEOUT, s.request(stats)).await,
            Slot::H2(s) => tokio::time::timeout(REQUEST_TIMEOUT, s.request(stats)).await,
        };
        r.unwrap_or_else(|_| {
            match self {
                Slot::H1(s) => s.abandon(),
                Slot::H2(s) => s.abandon(),
            }
            Err("timeout".into())
        })
    }
}

async fn connect_all(
    setup: &Arc<Setup>,
    connections: &[usize],
    stats: &Rc<Stats>,
) -> Result<Vec<Slot>, LoadError> {
    let handshake_err = |index: usize, kind: String| LoadError::Handshake {
        index,
        addr: setup.addr,
        kind,
    };
    if !setup.h2 && !setup.keepalive {
        return Ok(connections
            .iter()
            .map(|_| Slot::H1(H1Slot::new(setup.clone(), None)))
            .collect());
    }
    // All handshakes of this thread at once.
    let tasks: Vec<_> = connections
        .iter()
        .map(|&c| {
            let (setup, stats) = (setup.clone(), stats.clone());
            tokio::task::spawn_local(async move {
                let r = if setup.h2 {
                    handshake(&setup, &stats).await.map(|(s, d)| {
                        let conn = H2Conn::new(setup.clone(), s, d);
                        (0..setup.streams)
                            .map(|_| Slot::H2(H2Stream::new(conn.clone())))
                            .collect::<Vec<_>>()
                    })
                } else {
                    conn::open(&setup, &stats)
                        .await
                        .map(|io| vec![Slot::H1(H1Slot::new(setup.clone(), Some(H1Conn::new(io))))])
                };
                (c, r)
            })
        })
        .collect();
    let mut slots = Vec::new();
    for t in tasks {
        let (c, r) = t
            .await
            .map_err(|e| handshake_err(0, format!("task: {e}")))?;
        slots.extend(r.map_err(|k| handshake_err(c, k))?);
    }
    Ok(slots)
}

async fn run_job(
    slots: &mut Vec<Slot>,
    job: Job,
    stats: &Rc<Stats>,
    ticker: Option<&mut Ticker>,
) -> ThreadReport {
    let hs0 = *stats.handshakes.borrow();
    stats.take_run();
    let cpu0 = thread_cpu_ns();
    let open = matches!(job.plan, Plan::Open(_));
    // Every run tries given-up connections again.
    for s in slots.iter_mut() {
        s.revive();
    }
    tokio::time::sleep_until(job.start.into()).await;
    match job.plan {
        Plan::Fixed(shares) => {
            each_slot(slots, stats, move |i, mut slot, stats| {
                let share = shares.get(i).copied().unwrap_or(0);
                async move {
                    for done in 0..share {
                        if slot.dead() || crate::interrupt::requested() {
                            stats.lost(share - done);
                            break;
                        }
                        let t0 = Instant::now();
                        let r = slot.request(&stats).await;
                        stats.done(None, t0, r);
                    }
                    slot
                }
            })
            .await
        }
        Plan::Closed(deadline) => {
            each_slot(slots, stats, move |_, mut slot, stats| async move {
                loop {
                    let t0 = Instant::now();
                    if t0 >= deadline || slot.dead() || crate::interrupt::requested() {
                        break;
                    }
                    let r = slot.request(&stats).await;
                    stats.done(None, t0, r);
                }
                slot
            })
            .await
        }
        Plan::Open(schedule) => open_loop(slots, stats, schedule, ticker).await,
    }
    let mut run = stats.take_run();
    if !open {
        run.scheduled = run.sent;
    }
    ThreadReport {
        run,
        handshakes: stats.handshakes.borrow().minus(hs0),
        cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
    }
}

/// Run `f` on every slot as its own task; the slots come back in order.
async fn each_slot<F, Fut>(slots: &mut Vec<Slot>, stats: &Rc<Stats>, f: F)
where
    F: Fn(usize, Slot, Rc<Stats>) -> Fut,
    Fut: std::future::Future<Output = Slot> + 'static,
{
    let tasks: Vec<_> = slots
        .drain(..)
        .enumerate()
        .map(|(i, s)| tokio::task::spawn_local(f(i, s, stats.clone())))
        .collect();
    for t in tasks {
        slots.push(t.await.expect("load task panicked"));
    }
}

async fn open_loop(
    slots: &mut Vec<Slot>,
    stats: &Rc<Stats>,
    schedule: Schedule,
    mut ticker: Option<&mut Ticker>,
) {
    let total = slots.len();
    let idle: Rc<std::cell::RefCell<Vec<Slot>>> =
        Rc::new(std::cell::RefCell::new(std::mem::take(slots)));
    let in_flight = Rc::new(std::cell::Cell::new(0usize));
    let all_back = Rc::new(tokio::sync::Notify::new());
    let mut dead = Vec::new();
    let mut k = 0;
    while let Some(due) = schedule.at(k) {
        k += 1;
        if Instant::now() >= due && k % 16 == 0 {
            // Behind schedule: let the requests in flight make progress.
            tokio::task::yield_now().await;
        }
        if Instant::now() < due {
            match ticker.as_deref_mut() {
                Some(t) => t.sleep_until(due).await,
                None => tokio::time::sleep_until(due.into()).await,
            }
        }
        let lag = Instant::now().saturating_duration_since(due);
        let free = {
            let mut idle = idle.borrow_mut();
            // Given-up slots are never handed out again.
            while idle.last().is_some_and(Slot::dead) {
                dead.extend(idle.pop());
            }
            idle.pop()
        };
        // Every connection given up (the target is gone) or rig was
        // interrupted: stop scheduling rather than count the rest of the
        // window as dropped against a target that no longer exists.
        if dead.len() == total || crate::interrupt::requested() {
            if let Some(s) = free {
                idle.borrow_mut().push(s);
            }
            break;
        }
        let decision = decide(lag, EXPIRE_AFTER, free.is_some());
        let mut run = stats.run.borrow_mut();
        run.scheduled += 1;
        match decision {
            Decision::Expired => run.expired += 1,
            Decision::DroppedCapacity => run.dropped_capacity += 1,
            Decision::Send => {}
        }
        drop(run);
        let Some(mut slot) = free else { continue };
        if decision != Decision::Send {
            idle.borrow_mut().push(slot);
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (stats, idle, in_flight, all_back) = (
            stats.clone(),
            idle.clone(),
            in_flight.clone(),
            all_back.clone(),
        );
        tokio::task::spawn_local(async move {
            let sent_at = Instant::now();
            let r = slot.request(&stats).await;
            stats.done(Some(due), sent_at, r);
            idle.borrow_mut().push(slot);
            in_flight.set(in_flight.get() - 1);
            if in_flight.get() == 0 {
                all_back.notify_one();
            }
        });
    }
    while in_flight.get() > 0 {
        all_back.notified().await;
    }
    let mut back = std::mem::take(&mut *idle.borrow_mut());
    slots.append(&mut back);
    slots.append(&mut dead);
    debug_assert_eq!(slots.len(), total);
}

/// CPU time of the calling thread.
fn thread_cpu_ns() -> u64 {
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
struct Ticker {
    fd: AsyncFd<OwnedFd>,
}

impl Ticker {
    fn new() -> std::io::Result<Ticker> {
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

    async fn sleep_until(&mut self, t: Instant) {
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
