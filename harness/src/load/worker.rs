//! One generator thread: pinned, a current-thread tokio runtime with a
//! `LocalSet`, its share of the connections (kept across runs), and a loop
//! that runs jobs from the `Client` and hands back a `ThreadReport`.

use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::mpsc as tmpsc;

use super::conn::{RunStats, Setup, Stats, Timing};
use super::dispatch::{calibrate, prepare_thread, thread_cpu_ns, DispatchFacts, Ticker};
use super::h1::{H1Conn, H1Slot};
use super::h2::{handshake, H2Conn, H2Stream};
use super::h3::{H3Conn, H3Stream};
use super::hist::{summarize, Hists};
use super::schedule::Schedule;
use super::{conn, Handshakes, LoadError, LoadReport, Mode};

pub(crate) enum Plan {
    /// Requests per slot of this thread.
    Fixed(Vec<u64>),
    /// Stop sending at this instant.
    Closed(Instant),
    Open(Schedule),
    /// Close every connection and end the thread: gracefully (h2: GOAWAY
    /// first) or abruptly (the sockets closed, nothing said).
    Close {
        graceful: bool,
    },
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
    pub dispatch: DispatchFacts,
    /// `Plan::Close`: h2 connections that sent GOAWAY and closed in time.
    pub went_away: u64,
}

impl ThreadReport {
    pub fn merge(&mut self, o: ThreadReport) {
        let (a, b) = (&mut self.run, o.run);
        a.scheduled += b.scheduled;
        a.sent += b.sent;
        a.on_time += b.on_time;
        a.late += b.late;
        a.generator_late += b.generator_late;
        a.spin_ns += b.spin_ns;
        a.succeeded += b.succeeded;
        for (k, v) in b.errors {
            *a.errors.entry(k).or_default() += v;
        }
        for (k, v) in b.not_sent {
            *a.not_sent.entry(k).or_default() += v;
        }
        a.expired += b.expired;
        match (&mut a.hists, &b.hists) {
            (Some(x), Some(y)) => x.merge(y),
            (None, Some(_)) => a.hists = b.hists,
            _ => {}
        }
        a.last = a.last.max(b.last);
        self.handshakes.add(o.handshakes);
        self.cpu_ns += o.cpu_ns;
        // The widest window of any thread stands for the run.
        if o.dispatch.spin_window_ns >= self.dispatch.spin_window_ns {
            self.dispatch = o.dispatch;
        }
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
            on_time: r.on_time,
            late: r.late,
            expired: r.expired,
            generator_late: r.generator_late,
            succeeded: r.succeeded,
            errors: r.errors,
            not_sent: r.not_sent,
            latency: summarize(&hists.latency),
            request_latency: summarize(&hists.request_latency),
            dispatch_lag: summarize(&hists.dispatch_lag),
            queue_delay: summarize(&hists.queue_delay),
            histogram: hists.encode(),
            handshakes: self.handshakes,
            client_cpu_ns: self.cpu_ns,
            client_spin_ns: r.spin_ns.min(self.cpu_ns),
            dispatch: self.dispatch,
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
    ready: mpsc::Receiver<Result<(Handshakes, DispatchFacts), LoadError>>,
}

impl Starting {
    pub fn ready(self) -> Result<(Worker, Handshakes, DispatchFacts), LoadError> {
        let index = self.worker.index;
        match self.ready.recv() {
            Ok(Ok((h, d))) => Ok((self.worker, h, d)),
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
        spin: Option<Duration>,
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
                    let mut ticker = Ticker::new().ok();
                    let dispatch = match (spin, ticker.as_mut()) {
                        (Some(d), _) => DispatchFacts::given(d),
                        (None, Some(t)) => calibrate(t).await,
                        // No timerfd: tokio's timer, which rounds to whole
                        // milliseconds; spin through the last of them.
                        (None, None) => DispatchFacts::given(Duration::from_millis(1)),
                    };
                    let _ = ready_tx.send(Ok((*stats.handshakes.borrow(), dispatch)));
                    let mut closed = false;
                    while let Some(job) = job_rx.recv().await {
                        if let Plan::Close { graceful } = job.plan {
                            closed = true;
                            let went_away = close_all(std::mem::take(&mut slots), graceful).await;
                            let _ = report_tx.send(ThreadReport {
                                went_away,
                                ..ThreadReport::default()
                            });
                            break;
                        }
                        let mut r =
                            run_job(&mut slots, job, &stats, ticker.as_mut(), dispatch).await;
                        r.dispatch = dispatch;
                        if report_tx.send(r).is_err() {
                            break;
                        }
                    }
                    // Dropped: a TCP socket's close tells the server (FIN);
                    // a QUIC connection dropped in silence would live on at
                    // the server until its idle timeout, so it is closed
                    // (CONNECTION_CLOSE) before the thread ends.
                    if !closed && slots.iter().any(|s| matches!(s, Slot::H3(_))) {
                        close_all(slots, true).await;
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

/// One request stream of this thread.
pub(crate) enum Slot {
    H1(H1Slot),
    H2(H2Stream),
    H3(H3Stream),
}

impl Slot {
    /// When the last request's bytes were handed to the socket (or its
    /// connection was opened, when it needed one).
    pub fn sent_at(&self) -> Instant {
        match self {
            Slot::H1(s) => s.sent_at,
            Slot::H2(s) => s.sent_at,
            Slot::H3(s) => s.sent_at,
        }
    }

    pub fn dead(&self) -> bool {
        match self {
            Slot::H1(s) => s.dead(),
            Slot::H2(s) => s.dead(),
            Slot::H3(s) => s.dead(),
        }
    }

    fn revive(&mut self) {
        match self {
            Slot::H1(s) => s.revive(),
            Slot::H2(s) => s.revive(),
            Slot::H3(s) => s.revive(),
        }
    }

    fn setup(&self) -> &Setup {
        match self {
            Slot::H1(s) => s.setup(),
            Slot::H2(s) => s.setup(),
            Slot::H3(s) => s.setup(),
        }
    }

    pub fn setup_arc(&self) -> Arc<Setup> {
        match self {
            Slot::H1(s) => s.setup_arc(),
            Slot::H2(s) => s.setup_arc(),
            Slot::H3(s) => s.setup_arc(),
        }
    }

    /// No more requests: the deadline has passed (see `LoadSpec::deadline`)
    /// or rig was interrupted.
    pub fn stopped(&self) -> bool {
        crate::interrupt::requested() || self.setup().past_deadline()
    }

    /// One request, validated, given up as `timeout` after the request
    /// timeout or at the deadline (and as `interrupted` at a signal).
    pub async fn request(&mut self, stats: &Stats) -> Result<(), String> {
        let setup = self.setup_arc();
        let r = match self {
            Slot::H1(s) => conn::bounded(&setup, s.request(stats), |_| TIMEOUT.into()).await,
            Slot::H2(s) => conn::bounded(&setup, s.request(stats), |_| TIMEOUT.into()).await,
            Slot::H3(s) => conn::bounded(&setup, s.request(stats), |_| TIMEOUT.into()).await,
        };
        if matches!(&r, Err(k) if k == TIMEOUT || k == conn::INTERRUPTED) {
            match self {
                Slot::H1(s) => s.abandon(),
                Slot::H2(s) => s.abandon(),
                Slot::H3(s) => s.abandon(),
            }
        }
        r
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
                let r = if setup.h3.is_some() {
                    H3Conn::connect(setup.clone(), &stats).await.map(|conn| {
                        (0..setup.streams)
                            .map(|_| Slot::H3(H3Stream::new(conn.clone())))
                            .collect::<Vec<_>>()
                    })
                } else if setup.h2 {
                    handshake(&setup, &stats).await.map(|(s, d)| {
                        let conn = H2Conn::new(setup.clone(), s, d);
                        (0..setup.streams)
                            .map(|i| Slot::H2(H2Stream::new(conn.clone(), i)))
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

/// Error kind of a request not answered within the request timeout (or
/// before the deadline).
const TIMEOUT: &str = "timeout";

/// QUIC connections closed together before a 1 ms pause (see `close_all`).
const CLOSE_BATCH: usize = 16;

/// How long a graceful close waits for each h2 connection's GOAWAY (and
/// for the QUIC connections' draining periods, all at once).
const GOAWAY_WAIT: Duration = Duration::from_secs(1);

/// Close every connection of `slots`: h2 ones gracefully when asked (each
/// stream drops its handle, then each connection sends GOAWAY and closes),
/// h3 ones with CONNECTION_CLOSE (H3_NO_ERROR) and their draining period;
/// everything else, and everything when not graceful, by dropping it (the
/// socket closes; an h3 connection goes silent). Returns the h2 and h3
/// connections that went away gracefully.
async fn close_all(slots: Vec<Slot>, graceful: bool) -> u64 {
    if !graceful {
        drop(slots);
        return 0;
    }
    let mut conns: Vec<Rc<H2Conn>> = Vec::new();
    let mut quic: Vec<Rc<H3Conn>> = Vec::new();
    for s in slots {
        match s {
            Slot::H2(mut st) => {
                let c = st.release();
                if !conns.iter().any(|x| Rc::ptr_eq(x, &c)) {
                    conns.push(c);
                }
            }
            Slot::H3(mut st) => {
                let c = st.release();
                if !quic.iter().any(|x| Rc::ptr_eq(x, &c)) {
                    quic.push(c);
                }
            }
            Slot::H1(_) => {}
        }
    }
    let mut n = 0;
    for c in &conns {
        n += u64::from(c.go_away(GOAWAY_WAIT).await);
    }
    // The QUIC connections closed a few at a time: a CONNECTION_CLOSE is
    // sent once and never again unless the server sends more, so hundreds
    // of them at once, overflowing the server's one UDP receive buffer,
    // would leave the lost ones' state at the server until its idle
    // timeout. Then their draining periods are waited out side by side.
    let mut endpoints: Vec<quinn::Endpoint> = Vec::with_capacity(quic.len());
    for batch in quic.chunks(CLOSE_BATCH) {
        endpoints.extend(batch.iter().filter_map(|c| c.close_now()));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drained = futures_util::future::join_all(
        endpoints
            .iter()
            .map(|e| tokio::time::timeout(GOAWAY_WAIT, e.wait_idle())),
    )
    .await;
    n += drained.iter().filter(|r| r.is_ok()).count() as u64;
    n
}

async fn run_job(
    slots: &mut Vec<Slot>,
    job: Job,
    stats: &Rc<Stats>,
    ticker: Option<&mut Ticker>,
    dispatch: DispatchFacts,
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
                        if slot.setup().past_deadline() {
                            stats.not_sent(share - done, super::DEADLINE);
                            break;
                        }
                        if crate::interrupt::requested() {
                            stats.not_sent(share - done, super::conn::INTERRUPTED);
                            break;
                        }
                        if slot.dead() {
                            stats.not_sent(share - done, super::conn::LOST);
                            break;
                        }
                        let r = slot.request(&stats).await;
                        stats.done(Timing::closed(slot.sent_at()), r);
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
                    if t0 >= deadline || slot.dead() || slot.stopped() {
                        break;
                    }
                    let r = slot.request(&stats).await;
                    stats.done(Timing::closed(slot.sent_at()), r);
                }
                slot
            })
            .await
        }
        Plan::Open(schedule) => {
            let spin = super::open::run(slots, stats, schedule, ticker, dispatch.spin_window());
            stats.run.borrow_mut().spin_ns += spin.await;
        }
        // Handled by the thread's loop, which ends with it.
        Plan::Close { .. } => {}
    }
    let mut run = stats.take_run();
    if !open {
        // Without a schedule every request is due when it is sent; one
        // never sent was due all the same.
        run.scheduled = run.sent + run.not_sent.values().sum::<u64>();
        run.on_time = run.sent;
    }
    ThreadReport {
        run,
        handshakes: stats.handshakes.borrow().minus(hs0),
        cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
        dispatch,
        went_away: 0,
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
