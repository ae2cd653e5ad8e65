//! The search itself, pure: which end a reading is like, and the first
//! commit like bad given a way to measure any commit of the path.

use anyhow::Result;

use crate::compare::series::{self, Kind};

/// Which end of the bisection a commit's reading is like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Good,
    Bad,
    /// A timing reading inside neither end's band.
    Ambiguous,
}

/// The two ends' readings (medians) and the band a reading may stray from
/// each: for an exact counter 0, and any value other than good's is bad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ends {
    pub kind: Kind,
    /// Relative, as `rig compare`'s (`series::band`).
    pub band: f64,
    pub good: f64,
    pub bad: f64,
}

/// Why good and bad cannot be bisected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NotApart {
    /// The same value (an exact counter), or medians inside the band.
    Inside { band: f64 },
    /// A timing metric read once at an end: nothing says how far it
    /// moves by itself.
    NoBand,
}

impl Ends {
    /// The ends of `good`'s and `bad`'s readings (one per repeat each).
    /// A timing metric's band comes from the spread of each end's repeats
    /// (`series::band`, as `rig compare` computes a band from the readings
    /// of identical builds); good and bad must differ by more than it.
    pub fn new(kind: Kind, good: &[f64], bad: &[f64]) -> Result<Ends, NotApart> {
        let median = |v: &[f64]| crate::stats::median(v).unwrap_or(f64::NAN);
        let (g, b) = (median(good), median(bad));
        let band = series::band(kind, &[good.to_vec(), bad.to_vec()]).ok_or(NotApart::NoBand)?;
        if !series::moved(kind, band, g, b) {
            return Err(NotApart::Inside { band });
        }
        Ok(Ends {
            kind,
            band,
            good: g,
            bad: b,
        })
    }

    /// Is a commit whose reading (median) is `v` like good, like bad, or
    /// like neither? Exact: good only when equal to good. Timing: inside
    /// one end's band only, that end; inside both (the bands overlap
    /// between two close ends), the nearer; inside neither, ambiguous.
    pub fn classify(&self, v: f64) -> Side {
        let near_good = !series::moved(self.kind, self.band, self.good, v);
        if self.kind == Kind::Exact {
            return if near_good { Side::Good } else { Side::Bad };
        }
        let near_bad = !series::moved(self.kind, self.band, self.bad, v);
        match (near_good, near_bad) {
            (true, false) => Side::Good,
            (false, true) => Side::Bad,
            (true, true) if (v - self.good).abs() <= (v - self.bad).abs() => Side::Good,
            (true, true) => Side::Bad,
            (false, false) => Side::Ambiguous,
        }
    }

    /// About how far a reading may stray from `level`, in its unit (the
    /// half width `series::moved` allows is the band of the mean of the
    /// two values compared).
    pub fn reach(&self, level: f64) -> f64 {
        self.band * level.abs()
    }
}

/// Where [`search`] stopped, as indexes of the ancestry path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `first` is bad-like and `parent` (its predecessor on the path)
    /// good-like.
    Found { parent: usize, first: usize },
    /// `at` is like neither end; the step is in `lo..=hi` (`lo` good-like,
    /// `hi` bad-like), the interval known when `at` was met.
    Ambiguous { at: usize, lo: usize, hi: usize },
}

/// Binary search of a path of `len` commits whose first is good-like and
/// last bad-like: `side(i, lo)` measures and classifies commit `i`; `lo`
/// is the nearest commit before it already measured (good-like).
pub fn search(len: usize, mut side: impl FnMut(usize, usize) -> Result<Side>) -> Result<Outcome> {
    let (mut lo, mut hi) = (0, len - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        match side(mid, lo)? {
            Side::Good => lo = mid,
            Side::Bad => hi = mid,
            Side::Ambiguous => return Ok(Outcome::Ambiguous { at: mid, lo, hi }),
        }
    }
    Ok(Outcome::Found {
        parent: lo,
        first: hi,
    })
}
