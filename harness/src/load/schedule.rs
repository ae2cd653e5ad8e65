//! Work division and the open-loop schedule.
//!
//! Open-loop policy, exactly:
//! - The total rate is split over the generator threads in proportion to
//!   their streams (connection × stream slots). Thread `i` sends at evenly
//!   spaced times `start + phase_i + k / rate_i` for every `k` with a time
//!   before `start + duration`; each such time is one **scheduled** request.
//!   Phases spread the threads' first sends over one total-rate period.
//! - When a send time comes (the thread sleeps until shortly before it and
//!   spins the rest, see `dispatch`), the request is sent on an idle stream
//!   of the thread (**on time**), or, when every stream is busy, queued
//!   (FIFO) and sent on the next stream that frees up (**late**). A queued
//!   request not sent within `EXPIRE_AFTER` of its time is **expired**.
//!   Streams of other threads are not borrowed. Nothing is dropped: a
//!   dropped request would be exactly one that met a slow server.
//! - Latency runs from the scheduled time (coordinated omission corrected);
//!   request latency from the actual send; dispatch lag from when the
//!   request could go (its time, or when a stream freed up) to the send;
//!   queueing delay from its time to when a stream freed up.
//!
//! So `scheduled = on_time + late + expired` always holds.

use std::time::{Duration, Instant};

/// Share `i` of `total` split over `n` parts as evenly as possible (the
/// first `total % n` parts get one more).
pub fn share(total: u64, n: u64, i: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    total / n + u64::from(i < total % n)
}

/// One thread's send times.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub start: Instant,
    pub end: Instant,
    /// Offset of the first send from `start`.
    pub phase: Duration,
    /// Requests per second on this thread.
    pub rate: f64,
}

impl Schedule {
    /// Thread `index`'s part of `rate` when it holds `slots` of
    /// `total_slots` streams.
    pub fn for_thread(
        start: Instant,
        duration: Duration,
        rate: f64,
        slots: usize,
        total_slots: usize,
        index: usize,
    ) -> Schedule {
        let rate_i = if total_slots == 0 {
            0.0
        } else {
            rate * slots as f64 / total_slots as f64
        };
        let phase = if rate > 0.0 && rate.is_finite() {
            Duration::from_secs_f64(index as f64 / rate).min(duration)
        } else {
            Duration::ZERO
        };
        Schedule {
            start,
            end: start + duration,
            phase,
            rate: rate_i,
        }
    }

    /// The `k`-th send time, or `None` once past the end.
    pub fn at(&self, k: u64) -> Option<Instant> {
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            return None;
        }
        let offset = self.phase.as_secs_f64() + k as f64 / self.rate;
        if offset > 1e9 {
            return None;
        }
        let t = self.start + Duration::from_secs_f64(offset);
        (t < self.end).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for (total, n) in [(0, 3), (10, 3), (2000, 7), (5, 8)] {
            let s: Vec<u64> = (0..n).map(|i| share(total, n, i)).collect();
            assert_eq!(s.iter().sum::<u64>(), total);
            assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn a_thread_schedules_rate_times_duration_sends() {
        let start = Instant::now();
        let s = Schedule::for_thread(start, Duration::from_secs(2), 1000.0, 4, 8, 0);
        assert_eq!(s.rate, 500.0);
        let n = (0..).take_while(|&k| s.at(k).is_some()).count();
        assert_eq!(n, 1000);
        assert_eq!(
            s.at(1).unwrap() - s.at(0).unwrap(),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn threads_together_schedule_the_total_rate() {
        let start = Instant::now();
        let total: usize = (0..3)
            .map(|i| {
                let s = Schedule::for_thread(start, Duration::from_secs(1), 300.0, 2, 6, i);
                (0..).take_while(|&k| s.at(k).is_some()).count()
            })
            .sum();
        assert_eq!(total, 300);
    }

    #[test]
    fn a_zero_rate_schedules_nothing() {
        let s = Schedule::for_thread(Instant::now(), Duration::from_secs(1), 0.0, 1, 1, 0);
        assert_eq!(s.at(0), None);
    }
}
