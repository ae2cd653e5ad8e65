//! Per-request metrics: the one place a window's counts are divided by its
//! request count ([`per_request`]), the counter vocabulary `rig run`, `rig
//! ab`, `rig gate` and report.html share, and the identity of a case across
//! arms, runs and baselines. (The report's terminal table and flamegraph
//! sites sit below this module, which is built from their `Attribution`:
//! they divide by the same [`per_request`], from `stats`; flamegraphs scale
//! their integer counts for display in `report::flame::Scale`.)
//!
//! In: an [`Attribution`](crate::report::Attribution) (a finished window,
//! symbolized) and a [`Case`](crate::scenario::Case). Out: per-request
//! values by counter name, and [`CaseKey`]s.

mod case_key;
pub mod names;

/// Which locks stack events are acquisitions and which are waits, for
/// the pages that read a result's stacks (`html`).
pub use crate::report::{is_lock_acquisition, is_lock_wait};
pub use case_key::CaseKey;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::probe::Family;
use crate::report::Attribution;

/// Per-request counters of the counted pass (exact window differences).
/// Read back as written (`case::view`); a total a file lacks is `None`.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PerRequest {
    pub syscalls: Option<f64>,
    pub allocations: Option<f64>,
    pub alloc_bytes: Option<f64>,
    pub frees: Option<f64>,
    pub copy_bytes: Option<f64>,
    pub copy_calls: Option<f64>,
    pub lock_acquisitions: Option<f64>,
    pub contended: Option<f64>,
    pub page_faults: Option<f64>,
    pub voluntary_cs: Option<f64>,
    pub involuntary_cs: Option<f64>,
}

impl PerRequest {
    pub fn of(a: &Attribution) -> PerRequest {
        let n = a.window.requests;
        let per = |f: Family, v: u64| per_request(v, n).filter(|_| a.families.contains(&f));
        PerRequest {
            syscalls: per(Family::Syscalls, a.syscalls.iter().map(|r| r.count).sum()),
            allocations: per(Family::Alloc, a.alloc_totals.allocations),
            alloc_bytes: per(Family::Alloc, a.alloc_totals.bytes),
            frees: per(Family::Alloc, a.alloc_totals.frees),
            copy_bytes: per(Family::Copy, a.copy.iter().map(|r| r.bytes).sum()),
            copy_calls: per(Family::Copy, a.copy.iter().map(|r| r.calls).sum()),
            lock_acquisitions: per(
                Family::Locks,
                a.locks
                    .iter()
                    .filter(|r| r.op != "unlock")
                    .map(|r| r.acquired)
                    .sum(),
            ),
            contended: per(Family::Locks, a.locks.iter().map(|r| r.contended).sum()),
            page_faults: per(Family::Faults, a.faults.iter().map(|r| r.count).sum()),
            voluntary_cs: per(Family::Sched, a.sched.voluntary),
            involuntary_cs: per(Family::Sched, a.sched.involuntary),
        }
    }

    /// Each total with its value, in the schema's order
    /// (`names::PER_REQUEST`; the test below checks the two agree).
    pub fn values(&self) -> [(&'static names::Total, Option<f64>); 11] {
        let v = [
            self.syscalls,
            self.allocations,
            self.alloc_bytes,
            self.frees,
            self.copy_bytes,
            self.copy_calls,
            self.lock_acquisitions,
            self.contended,
            self.page_faults,
            self.voluntary_cs,
            self.involuntary_cs,
        ];
        std::array::from_fn(|i| (&names::PER_REQUEST[i], v[i]))
    }
}

/// The one per-request division. It is defined in the leaf `stats` so the
/// report's table and flamegraph sites, below this module, divide by it too.
pub use crate::stats::per_request;

/// Every exact per-request counter of a counted window, by name: the totals
/// and one entry per call site (alloc/copy/faults) and per syscall.
pub fn counters(p: &PerRequest, a: &Attribution) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (t, v) in p.values() {
        if let Some(v) = v.filter(|_| t.exact) {
            m.insert(t.name.to_string(), v);
        }
    }
    let site = |s: &crate::symbolize::Site| -> String {
        match (&s.function, s.file_line()) {
            (Some(f), Some(fl)) => format!("{f} ({fl})"),
            (Some(f), None) => f.clone(),
            _ => s.label(),
        }
    };
    // Without a request count nothing is added: no counter is per request.
    let requests = a.window.requests;
    let mut add = |k: String, v: u64| {
        if let Some(v) = per_request(v, requests) {
            *m.entry(k).or_insert(0.0) += v;
        }
    };
    for row in &a.alloc {
        // An application allocator's entry points are its own names
        // (`__pool_alloc`, a declared `arena_alloc`): said as such.
        let kind = names::alloc_site_kind(&row.kind, Some(&row.allocator));
        add(format!("{kind} calls @ {}", site(&row.site)), row.calls);
        if row.bytes > 0 {
            add(format!("{kind} bytes @ {}", site(&row.site)), row.bytes);
        }
    }
    for row in &a.copy {
        add(
            format!("{} bytes @ {}", row.kind, site(&row.site)),
            row.bytes,
        );
        add(
            format!("{} calls @ {}", row.kind, site(&row.site)),
            row.calls,
        );
    }
    for row in &a.syscalls {
        add(format!("syscall {}", row.name), row.count);
    }
    for row in &a.faults {
        add(format!("faults @ {}", site(&row.site)), row.count);
    }
    stack_counters(a, &mut add);
    user_counters(a, &mut m);
    m
}

/// The probes a user named: `PROBE calls/req` and `PROBE calls @ SITE`,
/// by a string argument `PROBE calls @ argS=VALUE` (a JVM's objects by
/// class), and with a summed argument `PROBE argN summed/req` and `… @ SITE`
/// (signed: a marker's argument may be negative). A probe that never
/// fired is a counter of 0, not an absent one.
fn user_counters(a: &Attribution, m: &mut BTreeMap<String, f64>) {
    let Some(n) = a.window.requests.filter(|n| *n > 0) else {
        return;
    };
    let per = |v: i128| v as f64 / n as f64;
    for p in &a.user {
        m.insert(format!("{} calls/req", p.probe), per(i128::from(p.calls)));
        let summed = p.arg.map(|i| format!("{} arg{i} summed", p.probe));
        if let (Some(s), Some(sum)) = (&summed, p.arg_sum) {
            m.insert(format!("{s}/req"), per(sum));
        }
        for r in &p.sites {
            let at = stack_site(&r.site);
            *m.entry(format!("{} calls @ {at}", p.probe)).or_insert(0.0) +=
                per(i128::from(r.calls));
            if let (Some(s), Some(sum)) = (&summed, r.arg_sum) {
                *m.entry(format!("{s} @ {at}")).or_insert(0.0) += per(sum);
            }
        }
        // By the string argument S (`#S`): `PROBE calls @ argS=VALUE`.
        let Some(by) = p.by else { continue };
        for v in &p.by_value {
            let at = format!("arg{}={}", by.arg, v.value);
            m.insert(
                format!("{} calls @ {at}", p.probe),
                per(i128::from(v.calls)),
            );
            if let (Some(s), Some(sum)) = (&summed, v.arg_sum) {
                m.insert(format!("{s} @ {at}"), per(sum));
            }
        }
    }
}

/// Per-stack counters (exact families only: not off-CPU time or samples):
/// `syscall NAME @ USER SITE` for syscalls by call site, and for every
/// event `EVENT stack calls @ USER SITE < CALLER < CALLER` (with `stack
/// bytes` for allocations and copies). A stack is named by its user site
/// and the two frames above it: stacks that differ only inside the
/// wrappers count as one.
fn stack_counters(a: &Attribution, add: &mut impl FnMut(String, u64)) {
    use crate::probe::Family;
    let st = &a.stacks;
    for r in &st.rows {
        if !matches!(
            r.family,
            Family::Syscalls
                | Family::Alloc
                | Family::Copy
                | Family::Locks
                | Family::Faults
                | Family::User
        ) || r.event.contains("futex wait")
        {
            continue;
        }
        let Some(frames) = r.stack.as_ref().and_then(|s| st.stacks.get(s)) else {
            continue;
        };
        let Some(user) = frames.frames.get(frames.user_site) else {
            continue;
        };
        let mut chain = stack_site(user);
        for f in frames.frames.iter().skip(frames.user_site + 1).take(2) {
            chain.push_str(" < ");
            chain.push_str(f.function.as_deref().unwrap_or("?"));
        }
        if r.family == Family::Syscalls {
            add(
                format!("syscall {} @ {}", r.event, stack_site(user)),
                r.count,
            );
        }
        add(format!("{} stack calls @ {chain}", r.event), r.count);
        if r.amount > 0 && matches!(r.family, Family::Alloc | Family::Copy) {
            add(format!("{} stack bytes @ {chain}", r.event), r.amount);
        }
    }
}

/// `function (file:line)` of a frame, or its label.
fn stack_site(s: &crate::symbolize::Site) -> String {
    match (&s.function, s.file_line()) {
        (Some(f), Some(fl)) => format!("{f} ({fl})"),
        (Some(f), None) => f.clone(),
        _ => s.label(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_request_is_none_without_a_request_count() {
        assert_eq!(per_request(7, None), None);
        assert_eq!(per_request(7, Some(0)), None);
        assert_eq!(per_request(7, Some(2)), Some(3.5));
    }

    #[test]
    fn a_user_probes_sum_is_an_amount_made_of_its_calls() {
        let total = "usdt:postgresql:buffer__read__done arg7 summed/req";
        assert!(!names::is_event_count(total));
        assert_eq!(
            names::events_of(total).as_deref(),
            Some("usdt:postgresql:buffer__read__done calls/req")
        );
        let site = "usdt:python:function__entry arg2 summed @ f (x.c:3)";
        assert!(!names::is_event_count(site));
        assert_eq!(
            names::events_of(site).as_deref(),
            Some("usdt:python:function__entry calls @ f (x.c:3)")
        );
        assert!(names::is_event_count(
            "func:ngx_http_core_run_phases calls/req"
        ));
        // Counted by a string argument: a count, and a name a baseline keeps.
        let by = "usdt:hotspot:object__alloc calls @ arg1=Server$Item";
        assert!(names::is_event_count(by));
        assert_eq!(names::check_counter_name(by), Ok(()));
    }

    #[test]
    fn a_site_named_bytes_does_not_make_a_calls_counter_a_bytes_counter() {
        // rig-peer's gate has sites in the `bytes` crate: its rare-event
        // tolerance once missed them, and a once-a-second date render
        // breached the gate on a slow machine.
        let site = "bytes::bytes::Bytes::copy_from_slice (bytes.rs:348) < core::ops::function::FnOnce::call_once";
        assert!(names::is_event_count(&format!(
            "malloc stack calls @ {site}"
        )));
        assert!(names::is_event_count(&format!("free calls @ {site}")));
        assert!(!names::is_event_count(&format!(
            "malloc stack bytes @ {site}"
        )));
        assert!(!names::is_event_count("alloc bytes/req"));
        assert!(names::is_event_count("allocs/req"));
        assert!(!names::is_event_count("Ir @ bytes::Bytes::len"));
    }

    #[test]
    fn the_per_request_fields_are_the_schema_in_order() {
        let json = serde_json::to_string(&PerRequest::default()).unwrap();
        let fields: Vec<String> = names::PER_REQUEST
            .iter()
            .map(|t| format!("\"{}\":null", t.field))
            .collect();
        assert_eq!(json, format!("{{{}}}", fields.join(",")));
        // `values` pairs each field with its own value.
        let p = PerRequest {
            syscalls: Some(0.0),
            allocations: Some(1.0),
            alloc_bytes: Some(2.0),
            frees: Some(3.0),
            copy_bytes: Some(4.0),
            copy_calls: Some(5.0),
            lock_acquisitions: Some(6.0),
            contended: Some(7.0),
            page_faults: Some(8.0),
            voluntary_cs: Some(9.0),
            involuntary_cs: Some(10.0),
        };
        let json = serde_json::to_value(&p).unwrap();
        for (t, v) in p.values() {
            assert_eq!(json[t.field].as_f64(), v, "{}", t.field);
        }
    }
}
