//! Flamegraphs and pprof profiles of one window's whole stacks, for every
//! family: on-CPU time, off-CPU time, allocations and their bytes, copied
//! bytes, lock acquisitions and lock wait, page faults, syscalls.
//!
//! In: the recorded stacks of a window (`input::Recorded`: from an
//! `Attribution` just measured, or read back from rig's JSON) and the
//! window's request count. Out: per graph, folded stacks (`folded`), an SVG
//! rendered by inferno (`svg`), and per family a gzipped pprof
//! `profile.proto` (`pprof`); A→B differential SVGs and folded files for
//! `rig ab`. A fixed-count window's values are per request: a frame's width
//! is what it costs one request.

pub mod folded;
pub mod input;
pub mod outdir;
pub mod pprof;
pub mod sites;
pub mod svg;
pub mod write;

use std::collections::BTreeMap;

use crate::probe::Family;
use crate::symbolize::{Naming, Site};
use input::{Recorded, Row};

/// What a value counts, as pprof names units (pprof scales `bytes` and
/// `nanoseconds` when it prints them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Count,
    Bytes,
    Nanoseconds,
}

impl Unit {
    pub fn pprof(self) -> &'static str {
        match self {
            Unit::Count => "count",
            Unit::Bytes => "bytes",
            Unit::Nanoseconds => "nanoseconds",
        }
    }
}

/// One weight of a family: a flamegraph of its own, and a sample type of
/// the family's pprof profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measure {
    /// File stem of its graph: `flame/<case>/<graph>.svg`. The first
    /// measure of each family is named after the family.
    pub graph: &'static str,
    /// pprof sample type.
    pub sample_type: &'static str,
    pub unit: Unit,
    /// What one unit is, for titles: "allocations", "bytes allocated".
    pub what: &'static str,
}

const fn m(
    graph: &'static str,
    sample_type: &'static str,
    unit: Unit,
    what: &'static str,
) -> Measure {
    Measure {
        graph,
        sample_type,
        unit,
        what,
    }
}

use Unit::{Bytes, Count, Nanoseconds};
const ALLOC: &[Measure] = &[
    m("alloc", "alloc_objects", Count, "allocations"),
    m("alloc_bytes", "alloc_space", Bytes, "bytes allocated"),
];
const COPY: &[Measure] = &[
    m("copy", "copy_space", Bytes, "bytes copied"),
    m("copy_calls", "copy_calls", Count, "copy calls"),
];
const LOCKS: &[Measure] = &[
    m("locks", "lock_acquisitions", Count, "lock acquisitions"),
    m(
        "lock_wait",
        "lock_wait",
        Nanoseconds,
        "ns waiting for locks",
    ),
];
const FAULTS: &[Measure] = &[m("faults", "page_faults", Count, "page faults")];
const SYSCALLS: &[Measure] = &[m("syscalls", "syscalls", Count, "syscalls")];
const SCHED: &[Measure] = &[
    m("sched", "off_cpu", Nanoseconds, "ns off-CPU"),
    m(
        "sched_switches",
        "context_switches",
        Count,
        "context switches",
    ),
];
const CPU: &[Measure] = &[
    m("cpu", "cpu", Nanoseconds, "ns on-CPU (sampled)"),
    m("cpu_samples", "samples", Count, "on-CPU samples"),
];

/// The probes a user named: every probe's calls in one graph, each
/// stack under the probe it fired (the event is the graph's leaf), and
/// the arguments summed (`--usdt …@N`).
const USER: &[Measure] = &[
    m("user", "user_probe_calls", Count, "user probe calls"),
    m(
        "user_arg",
        "user_probe_arg",
        Count,
        "user probe argument summed",
    ),
];

/// The measures of a family, the family's own graph first.
pub fn measures(f: Family) -> &'static [Measure] {
    match f {
        Family::Alloc => ALLOC,
        Family::Copy => COPY,
        Family::Locks => LOCKS,
        Family::Faults => FAULTS,
        Family::Syscalls => SYSCALLS,
        Family::Sched => SCHED,
        Family::Cpu => CPU,
        Family::User => USER,
    }
}

/// The measure drawn in `graph`, and its family.
pub fn graph(name: &str) -> Option<(Family, usize)> {
    Family::ALL.into_iter().find_map(|f| {
        measures(f)
            .iter()
            .position(|m| m.graph == name)
            .map(|i| (f, i))
    })
}

/// Every graph name, in family order.
pub fn graph_names() -> Vec<&'static str> {
    Family::ALL
        .into_iter()
        .flat_map(|f| measures(f).iter().map(|m| m.graph))
        .collect()
}

/// The values a row adds to its family's measures (in `measures` order),
/// or `None` for a row that is not counted in any (a free, an allocation
/// made inside another counted one).
fn row_values(row: &Row) -> Option<Vec<u64>> {
    let (c, a) = (row.count, row.amount);
    Some(match row.family {
        Family::Alloc => {
            let freeing = row.event.starts_with("free")
                || row.event.starts_with("cfree")
                || row.event.starts_with("operator delete");
            if freeing || row.inner || row.size_class.is_none() {
                return None;
            }
            vec![c, a]
        }
        Family::Copy => vec![a, c],
        Family::Locks => match row.event.as_str() {
            e if crate::report::is_lock_acquisition(e) => vec![c, 0],
            e if crate::report::is_lock_wait(e) => vec![0, a],
            _ => return None,
        },
        Family::Faults | Family::Syscalls => vec![c],
        Family::Sched | Family::Cpu => vec![a, c],
        Family::User => vec![c, a],
    })
}

/// One source line of a frame: the physical function, or a function
/// inlined into it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Line {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LocKind {
    User,
    Kernel,
    /// What was counted (a syscall's name, a fault's kind), drawn as a
    /// frame between the user and the kernel frames.
    Event,
}

/// One frame of a stack: an address in a module, and the functions it
/// stands for (the physical one first, then those inlined into it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loc {
    pub kind: LocKind,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub addr: u64,
    pub module_offset: u64,
    /// Outermost first.
    pub lines: Vec<Line>,
}

/// One stack of a family with its values (window totals, per measure).
#[derive(Clone, Debug)]
pub struct Sample {
    /// Innermost first.
    pub locs: Vec<Loc>,
    pub event: String,
    pub pid: u32,
    pub values: Vec<u64>,
}

/// A family's stacks in one window.
#[derive(Clone, Debug)]
pub struct Profile {
    pub family: Family,
    /// What was measured: a case id, or `pid N (command)`.
    pub label: String,
    /// Successful requests in a fixed-count window.
    pub requests: Option<u64>,
    pub elapsed_ns: u64,
    pub samples: Vec<Sample>,
    /// Events counted with an incomplete stack or none (drawn as far as
    /// they go, or under `[no stack]`).
    pub incomplete_events: u64,
    pub missing_stacks: u64,
    /// On-CPU sampling period.
    pub period_ns: u64,
}

impl Profile {
    pub fn measures(&self) -> &'static [Measure] {
        measures(self.family)
    }

    /// Window totals of measure `i`.
    pub fn total(&self, i: usize) -> u64 {
        // A user probe's signed argument sums modulo 2^64.
        self.samples
            .iter()
            .fold(0u64, |t, s| t.wrapping_add(s.values[i]))
    }
}

/// The family's profile of a recorded window; `None` when the family did
/// not run or took no stacks.
pub fn profile(r: &Recorded, family: Family, label: &str) -> Option<Profile> {
    if !r.families.contains(&family) || !r.stacks.enabled {
        return None;
    }
    let mut samples = Vec::new();
    for row in r.stacks.rows.iter().filter(|x| x.family == family) {
        let Some(values) = row_values(row) else {
            continue;
        };
        samples.push(Sample {
            locs: locs_of(r, row),
            event: row.event.clone(),
            pid: row.pid,
            values,
        });
    }
    Some(Profile {
        family,
        label: label.to_string(),
        requests: r.window.requests.filter(|n| *n > 0),
        elapsed_ns: r.window.elapsed_ns,
        samples,
        incomplete_events: r
            .stacks
            .incomplete_events
            .get(&family)
            .copied()
            .unwrap_or(0),
        missing_stacks: r.stacks.stack_failures.get(&family).copied().unwrap_or(0),
        period_ns: r.cpu.period_ns,
    })
}

/// Whether the counted event is drawn as a frame of its own: a syscall's
/// name (a `syscall()` wrapper makes many), a fault's or a switch's kind.
fn event_frame(f: Family) -> bool {
    matches!(
        f,
        Family::Syscalls | Family::Faults | Family::Sched | Family::User
    )
}

/// A row's stack, innermost first: kernel frames, the event, user frames.
fn locs_of(r: &Recorded, row: &Row) -> Vec<Loc> {
    let mut locs = Vec::new();
    if let Some(k) = row
        .kernel_stack
        .as_ref()
        .and_then(|k| r.stacks.kernel.get(k))
    {
        locs.extend(k.iter().map(|name| kernel_loc(name)));
    }
    if event_frame(row.family) {
        locs.push(named(LocKind::Event, format!("[{}]", row.event)));
    }
    match row.stack.as_ref().and_then(|s| r.stacks.stacks.get(s)) {
        Some(s) => {
            locs.extend(s.frames.iter().map(user_loc));
            if !s.incomplete.is_empty() {
                locs.push(named(
                    LocKind::Event,
                    format!("[incomplete: {}]", s.incomplete.join(", ")),
                ));
            }
        }
        None => locs.push(named(LocKind::Event, "[no user stack]".into())),
    }
    // Rig's own probe handling is a tower of its own, beside the server's.
    if row.rig_probes {
        locs.push(named(LocKind::Event, "[rig's probes]".into()));
    }
    locs
}

fn named(kind: LocKind, function: String) -> Loc {
    Loc {
        kind,
        module: None,
        build_id: None,
        addr: 0,
        module_offset: 0,
        lines: vec![Line {
            function,
            file: None,
            line: None,
        }],
    }
}

/// `do_syscall_64+0x5c` → `do_syscall_64` (frames of one function merge).
fn kernel_loc(name: &str) -> Loc {
    let bare = match name.rsplit_once("+0x") {
        Some((f, off)) if off.chars().all(|c| c.is_ascii_hexdigit()) => f,
        _ => name,
    };
    named(LocKind::Kernel, bare.to_string())
}

/// A user frame: its function (no offset, so calls from one function
/// merge), and each function inlined at the address as a frame of its own.
pub fn user_loc(s: &Site) -> Loc {
    let physical = match s.naming {
        Naming::Symbol => s.function.clone().unwrap_or_else(|| s.label()),
        Naming::Plt => format!("{}@plt", s.function.as_deref().unwrap_or("?")),
        Naming::Jit => format!("{} [jit]", s.function.as_deref().unwrap_or("?")),
        Naming::Interpreted => format!(
            "{} [{}]",
            s.function.as_deref().unwrap_or("?"),
            s.module.as_deref().unwrap_or("?")
        ),
        Naming::Unnamed | Naming::NoModule => s.label(),
    };
    let mut lines = vec![Line {
        function: physical,
        file: s.file.clone(),
        line: s.line,
    }];
    lines.extend(s.inlined.iter().map(|i| Line {
        function: i.function.clone(),
        file: i.file.clone(),
        line: i.line,
    }));
    Loc {
        kind: LocKind::User,
        module: s.module.clone(),
        build_id: s.build_id.clone(),
        addr: s.addr,
        module_offset: s.module_offset,
        lines,
    }
}

/// How values are shown: per request (`per == 1`), per `per` requests
/// when a per-request value would not be a whole number, or window totals
/// (no request count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub requests: Option<u64>,
    /// The number of requests one shown value is for.
    pub per: u64,
}

impl Scale {
    /// The smallest of 1, 10, 100, 1000 requests that makes every value in
    /// `totals` a whole number, else the window's own count (exact, as
    /// totals). Nanoseconds are sampled or timed, never exact: per request,
    /// rounded.
    pub fn choose(
        requests: Option<u64>,
        unit: Unit,
        totals: impl IntoIterator<Item = u64> + Clone,
    ) -> Scale {
        let Some(n) = requests else {
            return Scale { requests, per: 1 };
        };
        if unit == Unit::Nanoseconds {
            // Timed, so rounded: per request, unless that rounds even the
            // largest stack to 0 (one 20 µs wait over 100,000 requests is
            // 0.2 ns/req); then per as many requests as make it whole.
            let max = totals.into_iter().max().unwrap_or(0) as u128;
            let per = [1, 10, 100, 1000]
                .into_iter()
                .find(|s| 2 * max * *s as u128 >= n as u128)
                .unwrap_or(n);
            return Scale { requests, per };
        }
        let per = [1, 10, 100, 1000]
            .into_iter()
            .find(|s| {
                totals
                    .clone()
                    .into_iter()
                    .all(|t| (t as u128 * *s as u128).is_multiple_of(n as u128))
            })
            .unwrap_or(n);
        Scale { requests, per }
    }

    /// A window total as shown. Not `stats::per_request`: folded stacks and
    /// pprof hold integers, so this is a rounded integer division (in u128,
    /// exact) per `per` requests, chosen above so exact counts stay whole.
    pub fn value(&self, total: u64) -> u64 {
        match self.requests {
            Some(n) => ((total as u128 * self.per as u128 + n as u128 / 2) / n as u128) as u64,
            None => total,
        }
    }

    /// `allocations per request`, `allocations per 1000 requests`,
    /// `allocations in the window`.
    pub fn unit_text(&self, what: &str) -> String {
        match (self.requests, self.per) {
            (None, _) => format!("{what} in the window"),
            (Some(_), 1) => format!("{what} per request"),
            (Some(_), p) => format!("{what} per {p} requests"),
        }
    }

    /// The shown value as a per-request number. Not `stats::per_request`:
    /// `shown` is already divided by the window's requests (by `value`);
    /// this only undoes the display scale of `per` requests.
    pub fn per_request(&self, shown: u64) -> f64 {
        shown as f64 / self.per as f64
    }
}

/// The scale of measure `i` of one or more profiles of the same family
/// (both arms of a differential graph share one).
pub fn scale_of(profiles: &[&Profile], i: usize) -> Scale {
    let unit = profiles[0].measures()[i].unit;
    let requests = profiles[0].requests;
    if profiles.iter().any(|p| p.requests != requests) {
        // Arms with different request counts: per request, rounded, for
        // both (a common whole-number scale may not exist).
        return Scale { requests, per: 1 };
    }
    let totals: Vec<u64> = profiles
        .iter()
        .flat_map(|p| folded::stacks(p, i).into_values())
        .collect();
    Scale::choose(requests, unit, totals)
}

/// The graph's title: `<label>: 1000 requests, allocations per request`.
pub fn title(p: &Profile, i: usize, scale: &Scale) -> String {
    let what = scale.unit_text(p.measures()[i].what);
    match p.requests {
        Some(n) => format!("{}: {n} requests, {what}", p.label),
        None => format!("{}: {what} ({:.1} s)", p.label, p.elapsed_ns as f64 / 1e9),
    }
}

/// Folded stacks summed by their folded line (stacks that differ only in
/// call-site offsets are one), for every graph format.
pub(crate) type Merged = BTreeMap<String, u64>;

#[cfg(test)]
pub(crate) mod tests;
