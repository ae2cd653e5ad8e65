//! One metric over a series of readings: its noise band and its steps.
//!
//! In: the metric's value at each reading (in the order given), the build
//! each reading measured, and every sample (rounds included) grouped by
//! build. Out: the band and the steps. Plain data, no I/O.

use serde::Serialize;

/// How a metric may move between two readings of the same code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A count of a fixed-count window divided by its requests: the same
    /// code gives the same number, so any move is a step (band 0).
    Exact,
    /// Throughput, latency, CPU, memory, context switches: the band is the
    /// spread seen between readings of identical builds.
    Timing,
}

/// A move outside the band between reading `from` (the last reading with a
/// value before it) and reading `to`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub from: usize,
    pub to: usize,
    pub before: f64,
    pub after: f64,
}

/// What [`steps`] found.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Moves {
    pub steps: Vec<Step>,
    /// An exact counter that moved between two readings of the same build
    /// (`(from, to)`): it is not exact here (something else runs in the
    /// window), so its moves elsewhere are suspect too.
    pub unstable: Vec<(usize, usize)>,
}

/// The band of a metric: 0 for an exact counter. For a timing metric,
/// from every build measured more than once: the largest relative
/// standard deviation `s` of one build's readings (each over its median),
/// and the band is `3·√2·s`, three standard deviations of the difference
/// of two single readings. `None` when no build was measured twice:
/// nothing says how much the metric moves by itself, so no step can be
/// told from noise.
pub fn band(kind: Kind, by_build: &[Vec<f64>]) -> Option<f64> {
    if kind == Kind::Exact {
        return Some(0.0);
    }
    by_build
        .iter()
        .filter(|v| v.len() >= 2)
        .map(|v| {
            let mut sorted = v.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2].abs();
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
            if median > 0.0 {
                sd / median
            } else if sd > 0.0 {
                f64::INFINITY
            } else {
                0.0
            }
        })
        .reduce(f64::max)
        .map(|s| 3.0 * std::f64::consts::SQRT_2 * s)
}

/// Is `b` outside `a`'s band? Exact counters: any difference beyond float
/// rounding of the per-request division.
pub fn moved(kind: Kind, band: f64, a: f64, b: f64) -> bool {
    let d = (b - a).abs();
    match kind {
        Kind::Exact => d > 1e-9 * a.abs().max(b.abs()).max(1.0),
        Kind::Timing => d > band * (a.abs() + b.abs()) / 2.0,
    }
}

/// The steps of one metric. `values[i]` is reading i's value (`None`: not
/// measured there, skipped), `builds[i]` its build. Two readings of the
/// same build never make a step: they are the negative control the band
/// comes from.
pub fn steps(kind: Kind, values: &[Option<f64>], builds: &[String], band: Option<f64>) -> Moves {
    let mut m = Moves::default();
    let mut last: Option<(usize, f64)> = None;
    for (i, v) in values.iter().enumerate() {
        let Some(b) = *v else { continue };
        if let Some((j, a)) = last {
            let same = builds[i] == builds[j];
            match (same, band) {
                (true, _) if kind == Kind::Exact && moved(kind, 0.0, a, b) => {
                    m.unstable.push((j, i))
                }
                (false, Some(w)) if moved(kind, w, a, b) => m.steps.push(Step {
                    from: j,
                    to: i,
                    before: a,
                    after: b,
                }),
                _ => {}
            }
        }
        last = Some((i, b));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_exact_counter_steps_once_where_it_moved() {
        let v = [Some(8.0), Some(8.0), Some(9.0), None, Some(9.0)];
        let m = steps(Kind::Exact, &v, &b(&["a", "b", "c", "d", "e"]), Some(0.0));
        assert_eq!(
            m.steps,
            vec![Step {
                from: 1,
                to: 2,
                before: 8.0,
                after: 9.0
            }]
        );
        assert!(m.unstable.is_empty());
    }

    #[test]
    fn timing_moves_inside_the_band_of_identical_builds_are_not_steps() {
        // Build a twice: 1000 and 1020 rps; s = 14.1 (1.39% of 1020), the
        // band 3·√2·s = 5.9%.
        let w = band(Kind::Timing, &[vec![1000.0, 1020.0], vec![1200.0]]).unwrap();
        assert!((w - 60.0 / 1020.0).abs() < 1e-9, "{w}");
        let builds = b(&["a", "a", "b", "c"]);
        let v = [Some(1000.0), Some(1020.0), Some(1070.0), Some(2000.0)];
        let m = steps(Kind::Timing, &v, &builds, Some(w));
        assert_eq!(m.steps.len(), 1, "{m:?}");
        assert_eq!((m.steps[0].from, m.steps[0].to), (2, 3));
    }

    #[test]
    fn without_a_repeated_build_timing_has_no_band_and_no_steps() {
        assert_eq!(band(Kind::Timing, &[vec![1.0], vec![5.0]]), None);
        let m = steps(Kind::Timing, &[Some(1.0), Some(5.0)], &b(&["a", "b"]), None);
        assert!(m.steps.is_empty());
    }

    #[test]
    fn an_exact_counter_that_moves_between_identical_builds_is_unstable() {
        let m = steps(
            Kind::Exact,
            &[Some(3.0), Some(3.5)],
            &b(&["a", "a"]),
            Some(0.0),
        );
        assert!(m.steps.is_empty());
        assert_eq!(m.unstable, vec![(0, 1)]);
    }
}
