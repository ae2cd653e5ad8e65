//! Was the load inside the window? The target's CPU time, read from
//! `/proc/<pid>/task/*/schedstat` in slices of the window, is the evidence:
//! a window in which the target barely ran measured no load; one whose
//! target was as busy in its last (or first) slice as in the middle cut a
//! longer load in two, so the requests the user counted for the load are
//! not the requests inside the window.

use std::time::{Duration, Instant};

/// Length of one slice.
pub const SLICE: Duration = Duration::from_millis(100);
/// Below this share of one CPU over the whole window the target was idle.
pub const IDLE_SHARE: f64 = 0.01;
/// An edge slice at least this share of the window's busy level is busy.
pub const EDGE_BUSY: f64 = 0.5;
/// A slice below this share of the busy level is idle.
pub const SLICE_IDLE: f64 = 0.1;

/// CPU time of a process tree over a window, slice by slice.
pub struct Activity {
    pid: u32,
    tree: bool,
    last: (Instant, u64),
    /// (slice length, CPU ns in it).
    slices: Vec<(Duration, u64)>,
}

impl Activity {
    /// Start at the window's start.
    pub fn start(pid: u32, tree: bool) -> Activity {
        Activity {
            pid,
            tree,
            last: (Instant::now(), cpu_ns(pid, tree)),
            slices: Vec::new(),
        }
    }

    /// Call often; closes a slice every [`SLICE`].
    pub fn tick(&mut self) {
        if self.last.0.elapsed() >= SLICE {
            self.close();
        }
    }

    fn close(&mut self) {
        let now = (Instant::now(), cpu_ns(self.pid, self.tree));
        // A process of the tree that exited takes its CPU time with it.
        let ns = now.1.saturating_sub(self.last.1);
        self.slices.push((now.0 - self.last.0, ns));
        self.last = now;
    }

    /// Close the last slice; the warnings the slices call for. `tied`:
    /// the window opened and closed with the load (a command rig ran), so
    /// only idleness is judged.
    pub fn finish(mut self, tied: bool) -> Vec<String> {
        self.close();
        judge(&self.slices, tied)
    }
}

/// Sum of the running time of every thread of `pid` (and its descendants).
fn cpu_ns(pid: u32, tree: bool) -> u64 {
    let mut pids = vec![pid];
    if tree {
        pids.extend(crate::process::descendants(pid));
    }
    pids.into_iter().map(crate::process::cpu_ns).sum()
}

fn share(d: Duration, ns: u64) -> f64 {
    ns as f64 / d.as_nanos().max(1) as f64
}

/// The warnings for a window cut into `slices` (length, CPU ns).
pub fn judge(slices: &[(Duration, u64)], tied: bool) -> Vec<String> {
    // A sliver at the end (the window closed just after a slice) says
    // nothing on its own: fold it into the slice before.
    let mut s: Vec<(Duration, u64)> = slices.to_vec();
    if s.len() > 1 && s[s.len() - 1].0 < SLICE / 4 {
        let (d, ns) = s.pop().expect("len > 1");
        let last = s.last_mut().expect("len > 1");
        last.0 += d;
        last.1 += ns;
    }
    let wall: Duration = s.iter().map(|x| x.0).sum();
    let cpu: u64 = s.iter().map(|x| x.1).sum();
    let mut out = Vec::new();
    if s.is_empty() {
        return out;
    }
    if share(wall, cpu) < IDLE_SHARE {
        out.push(format!(
            "the target was (nearly) idle: {:.1} ms of CPU in a {:.2} s window ({:.2}% of one CPU); \
             was the load running against it?",
            cpu as f64 / 1e6,
            wall.as_secs_f64(),
            100.0 * share(wall, cpu)
        ));
        return out;
    }
    if s.len() < 3 {
        return out;
    }
    let mut shares: Vec<f64> = s.iter().map(|&(d, ns)| share(d, ns)).collect();
    let (first, last) = (shares[0], shares[shares.len() - 1]);
    shares.sort_by(f64::total_cmp);
    // The busy level: the 90th percentile slice, so one burst does not set it.
    let level = shares[(shares.len() - 1) * 9 / 10];
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    // A slice is busy only when the target ran in it: with most slices
    // idle the busy level is 0, and 0% is not "as busy as the middle".
    let busy = |x: f64| x >= IDLE_SHARE && x >= EDGE_BUSY * level;
    if !tied {
        let busy_end = busy(last);
        let busy_start = busy(first);
        let edges = match (busy_start, busy_end) {
            (true, true) => {
                Some("was already busy when the window opened and still busy when it closed")
            }
            (false, true) => Some("was still busy when the window closed"),
            (true, false) => Some("was already busy when the window opened"),
            (false, false) => None,
        };
        if let Some(what) = edges {
            out.push(format!(
                "the target {what} (first slice {} of one CPU, last {}, busy level {}): the load \
                 and the window are not the same interval, so a request count taken from the load \
                 tool does not match the requests inside the window; tie them with \
                 `rig attach --pid P -- COMMAND` or `--drive`",
                pct(first),
                pct(last),
                pct(level)
            ));
        }
    }
    let idle = shares.iter().filter(|&&x| x < SLICE_IDLE * level).count();
    // Edges of a window opened just before and closed just after the load
    // are idle by design: only more than a third of it, and half a
    // second at least, is worth a word.
    if idle * 3 > shares.len() && idle >= 5 {
        out.push(format!(
            "the target was idle for {} of the window's {} slices of {} ms: whatever it did \
             in the background then is billed to the requests; shorten the window to the load",
            idle,
            shares.len(),
            SLICE.as_millis()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices of 100 ms at these shares of one CPU.
    fn slices(shares: &[f64]) -> Vec<(Duration, u64)> {
        shares
            .iter()
            .map(|&s| (SLICE, (s * SLICE.as_nanos() as f64) as u64))
            .collect()
    }

    #[test]
    fn a_load_inside_the_window_gets_no_warning() {
        let w = slices(&[0.0, 0.6, 0.7, 0.65, 0.7, 0.6, 0.7, 0.02]);
        assert!(judge(&w, false).is_empty(), "{:?}", judge(&w, false));
    }

    #[test]
    fn an_idle_target_is_said_whoever_drove_the_load() {
        let w = slices(&[0.001, 0.0, 0.002, 0.0]);
        for tied in [false, true] {
            let v = judge(&w, tied);
            assert_eq!(v.len(), 1);
            assert!(
                v[0].starts_with("the target was (nearly) idle: 0.3 ms of CPU in a 0.40 s window"),
                "{v:?}"
            );
        }
    }

    #[test]
    fn a_load_that_outlasted_the_window_is_said() {
        let w = slices(&[0.0, 0.5, 0.7, 0.7, 0.7, 0.7, 0.68]);
        let v = judge(&w, false);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("the target was still busy when the window closed (first slice 0% of one CPU, last 68%, busy level 70%)"), "{v:?}");
        // A command window ends with its load: not judged.
        assert!(judge(&w, true).is_empty());
        let both = judge(&slices(&[0.7, 0.7, 0.7, 0.7]), false);
        assert!(
            both[0].contains("already busy when the window opened and still busy"),
            "{both:?}"
        );
    }

    /// CPU time in two slices of ten (the 90th percentile slice is idle):
    /// idle edges are not "busy" at a busy level of 0%.
    #[test]
    fn idle_edges_are_never_called_busy() {
        let w = slices(&[0.0, 0.0, 0.0, 0.9, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0]);
        let v = judge(&w, false);
        assert!(v.iter().all(|l| !l.contains("busy when")), "{v:?}");
    }

    #[test]
    fn long_idle_stretches_are_said() {
        let w = slices(&[0.0, 0.7, 0.7, 0.7, 0.0, 0.0, 0.0, 0.0, 0.01, 0.0]);
        let v = judge(&w, false);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].starts_with("the target was idle for 7 of the window's 10 slices of 100 ms"),
            "{v:?}"
        );
    }

    #[test]
    fn a_sliver_at_the_end_joins_the_slice_before() {
        let mut w = slices(&[0.0, 0.7, 0.7, 0.7, 0.0]);
        // 5 ms at full load right at the close: not a busy last slice.
        w.push((Duration::from_millis(5), 5_000_000));
        assert!(judge(&w, false).is_empty(), "{:?}", judge(&w, false));
    }
}
