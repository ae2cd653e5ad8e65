//! Instructions per request: which backend counts them, and its window.
//!
//! In: a [`Choice`] (what the user asked for) and the host's PMU status
//! ([`crate::host::detect_pmu`]). Out: a [`Backend`] and a sentence
//! saying why it was picked; [`measure`] then runs that backend's
//! fixed-count window and returns an [`InstrWindow`] naming the backend.
//!
//! `auto` picks the hardware counter ([`super::perf`]) when the host has a
//! PMU and a callgrind window ([`super::callgrind`]) when it does not. The
//! two do not count the same thing (callgrind bills `rep movsb` per byte,
//! perf once), so numbers from one are never compared with the other's.
//! Asking for `perf` on a host without a PMU is an error, never 0.

use anyhow::{bail, Result};
use serde::Serialize;

use crate::host::Pmu;

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Perf,
    Callgrind,
}

impl Choice {
    pub fn parse(s: &str) -> Result<Choice, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "perf" => Ok(Choice::Perf),
            "callgrind" => Ok(Choice::Callgrind),
            other => Err(format!(
                "unknown instructions backend `{other}`; give \"auto\" (perf when the host has a PMU, \
                 else callgrind), \"perf\" or \"callgrind\""
            )),
        }
    }
}

/// What counts the instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// Hardware counter, `perf_event_open` (total only).
    Perf,
    /// valgrind's callgrind (total and self instructions per function).
    Callgrind,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Perf => "perf",
            Backend::Callgrind => "callgrind",
        }
    }

    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "perf" => Some(Backend::Perf),
            "callgrind" => Some(Backend::Callgrind),
            _ => None,
        }
    }

    /// Does the backend split instructions by function?
    pub fn per_function(self) -> bool {
        self == Backend::Callgrind
    }
}

/// The backend for `choice` on a host whose PMU is `pmu`, with the reason.
pub fn select(choice: Choice, pmu: &Pmu) -> Result<(Backend, String)> {
    Ok(match (choice, pmu.instructions) {
        (Choice::Auto, true) => (
            Backend::Perf,
            format!("perf (auto: PMU present; {})", pmu.detail),
        ),
        (Choice::Auto, false) => (
            Backend::Callgrind,
            format!("callgrind (auto: {})", pmu.detail),
        ),
        (Choice::Perf, true) => (Backend::Perf, format!("perf (asked for; {})", pmu.detail)),
        (Choice::Perf, false) => bail!(
            "instructions backend perf was asked for, but this host has no PMU: {}; \
             use \"auto\" or \"callgrind\"",
            pmu.detail
        ),
        (Choice::Callgrind, present) => (
            Backend::Callgrind,
            format!(
                "callgrind (asked for; PMU {})",
                if present { "present" } else { "absent" }
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pmu(present: bool) -> Pmu {
        Pmu {
            instructions: present,
            detail: if present {
                "perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) succeeded".into()
            } else {
                "no hardware PMU: perf_event_open(PERF_COUNT_HW_INSTRUCTIONS) failed".into()
            },
        }
    }

    #[test]
    fn auto_picks_perf_with_a_pmu_and_callgrind_without() {
        let (b, why) = select(Choice::Auto, &pmu(true)).unwrap();
        assert_eq!(b, Backend::Perf);
        assert!(why.starts_with("perf (auto: PMU present"), "{why}");
        let (b, why) = select(Choice::Auto, &pmu(false)).unwrap();
        assert_eq!(b, Backend::Callgrind);
        assert!(why.contains("no hardware PMU"), "{why}");
    }

    #[test]
    fn perf_without_a_pmu_is_an_error_not_zero() {
        let e = select(Choice::Perf, &pmu(false)).unwrap_err().to_string();
        assert!(e.contains("has no PMU"), "{e}");
        assert_eq!(
            select(Choice::Callgrind, &pmu(true)).unwrap().0,
            Backend::Callgrind
        );
        assert!(Choice::parse("papi").unwrap_err().contains("\"auto\""));
    }

    /// This host, as detected: auto follows the detection.
    #[test]
    fn auto_follows_this_hosts_detection() {
        let p = crate::host::detect_pmu();
        let (b, why) = select(Choice::Auto, &p).unwrap();
        assert_eq!(b == Backend::Perf, p.instructions, "{why}");
        assert!(
            why.contains(&p.detail),
            "the reason carries the detection: {why}"
        );
    }
}
