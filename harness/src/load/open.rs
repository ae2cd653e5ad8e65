//! The open loop of one generator thread: send times from a `Schedule`, a
//! FIFO queue for requests that find every stream busy, expiry.
//!
//! A due request that finds no free stream is late, not absent: it waits in
//! the queue and goes out on the next stream that frees up, its latency
//! still counted from its scheduled time. Dropping it instead would delete
//! exactly the requests that met a slow server (coordinated omission). A
//! stream that completes a request takes the queue's oldest request at once,
//! in the same task, so a queued request goes out the moment its stream is
//! free. A queued request not sent within `EXPIRE_AFTER` of its send time
//! expires: it is not sent, and its latency (the time it waited, at least
//! `EXPIRE_AFTER`) goes into the latency histogram.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::conn::{Stats, Timing};
use super::dispatch::{wait_until, Ticker, Timed};
use super::schedule::Schedule;
use super::worker::Slot;
use super::EXPIRE_AFTER;

/// The streams and queue of one thread's open loop.
struct Open {
    idle: RefCell<Vec<Slot>>,
    /// Streams given up (their connection failed again and again).
    dead: RefCell<Vec<Slot>>,
    /// Send times of the requests waiting for a stream, oldest first.
    queue: RefCell<VecDeque<Instant>>,
    in_flight: Cell<usize>,
    all_back: Notify,
    total: usize,
    /// What every slot's connection shares (its deadline).
    setup: Option<std::sync::Arc<super::conn::Setup>>,
}

impl Open {
    /// Expire the queued requests older than `EXPIRE_AFTER`.
    fn expire_old(&self, stats: &Stats, now: Instant) {
        let mut q = self.queue.borrow_mut();
        while q
            .front()
            .is_some_and(|&d| now.saturating_duration_since(d) > EXPIRE_AFTER)
        {
            let due = q.pop_front().expect("checked");
            stats.expired(due);
        }
    }

    /// The oldest queued request that has not expired.
    fn next_queued(&self, stats: &Stats, now: Instant) -> Option<Instant> {
        self.expire_old(stats, now);
        self.queue.borrow_mut().pop_front()
    }

    fn all_dead(&self) -> bool {
        self.dead.borrow().len() == self.total
    }
}

/// The deadline of the load has passed: the rest of the schedule is not
/// sent.
fn past_deadline(st: &Open) -> bool {
    st.setup.as_ref().is_some_and(|s| s.past_deadline())
}

/// Run `schedule` on `slots`; returns the dispatcher's spin time (ns) that
/// was not request work.
pub(crate) async fn run(
    slots: &mut Vec<Slot>,
    stats: &Rc<Stats>,
    schedule: Schedule,
    mut ticker: Option<&mut Ticker>,
    spin: Duration,
) -> u64 {
    let mut idle = std::mem::take(slots);
    // Slots are pushed and popped at the back: reverse so that the first
    // sends go out on the first streams.
    idle.reverse();
    let st = Rc::new(Open {
        setup: idle.first().map(Slot::setup_arc),
        total: idle.len(),
        idle: RefCell::new(idle),
        dead: RefCell::new(Vec::new()),
        queue: RefCell::new(VecDeque::new()),
        in_flight: Cell::new(0),
        all_back: Notify::new(),
    });
    let mut spin_ns = 0;
    let mut k = 0;
    while let Some(due) = schedule.at(k) {
        k += 1;
        spin_ns += wait_until(due, spin, ticker.as_deref_mut()).await;
        st.expire_old(stats, Instant::now());
        // Every stream given up (the target is gone) or rig was interrupted:
        // stop scheduling rather than count the rest of the window against a
        // target that no longer answers.
        if st.all_dead() || crate::interrupt::requested() || past_deadline(&st) {
            break;
        }
        stats.run.borrow_mut().scheduled += 1;
        let free = st.idle.borrow_mut().pop();
        match free {
            Some(slot) => {
                st.in_flight.set(st.in_flight.get() + 1);
                let task = serve(st.clone(), stats.clone(), slot, due);
                tokio::task::spawn_local(Timed(Box::pin(task)));
            }
            None => st.queue.borrow_mut().push_back(due),
        }
    }
    // The schedule is over: wait for the requests in flight (they drain the
    // queue), expiring queued requests on time meanwhile.
    while st.in_flight.get() > 0 {
        if st.queue.borrow().is_empty() {
            st.all_back.notified().await;
        } else {
            let _ = tokio::time::timeout(Duration::from_millis(5), st.all_back.notified()).await;
            st.expire_old(stats, Instant::now());
        }
    }
    // Requests still queued when no stream is left to send them: their
    // streams were given up.
    let left = st.queue.borrow_mut().drain(..).count() as u64;
    stats.not_sent(left, super::conn::LOST);
    slots.append(&mut st.idle.borrow_mut());
    slots.append(&mut st.dead.borrow_mut());
    debug_assert_eq!(slots.len(), st.total);
    spin_ns
}

/// Send `due` on `slot`, then the queued requests while there are any.
async fn serve(st: Rc<Open>, stats: Rc<Stats>, mut slot: Slot, due: Instant) {
    let mut due = due;
    let mut freed = None;
    loop {
        let r = slot.request(&stats).await;
        let sent = slot.sent_at();
        stats.done(
            Timing {
                due: Some(due),
                freed,
                sent,
            },
            r,
        );
        if slot.dead() {
            st.dead.borrow_mut().push(slot);
            break;
        }
        let now = Instant::now();
        match st.next_queued(&stats, now) {
            Some(d) => {
                due = d;
                freed = Some(now);
            }
            None => {
                st.idle.borrow_mut().push(slot);
                break;
            }
        }
    }
    st.in_flight.set(st.in_flight.get() - 1);
    if st.in_flight.get() == 0 {
        st.all_back.notify_one();
    }
}
