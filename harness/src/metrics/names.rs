//! The counter vocabulary shared by `rig run`, `rig ab`, `rig gate` and
//! report.html: total names, call-site and syscall names, instruction
//! counters, the case prefix a multi-case suite puts in front of them, and
//! the fields of the per-request schema.

/// One per-request total of a counted window.
#[derive(Clone, Copy, Debug)]
pub struct Total {
    /// Its field in the schema (`PerRequest`, a case's
    /// `counted.per_request`).
    pub field: &'static str,
    /// Its counter name (`rig gate`, `rig compare`, `rig bisect`).
    pub name: &'static str,
    /// Its short label (report.html's columns and charts).
    pub label: &'static str,
    /// Whether the same code gives the same count: an exact counter.
    /// Context switches and contention depend on scheduling, not on the
    /// code alone (`rig compare` gives them a band like timing; `rig gate`
    /// does not gate them).
    pub exact: bool,
    /// The probe family that counts it.
    pub family: &'static str,
}

/// The per-request totals, in the order of the schema: the one list of
/// them, read by the schema ([`super::PerRequest`]), `rig gate`, `rig
/// compare` and report.html.
pub const PER_REQUEST: [Total; 11] = [
    total("syscalls", "syscalls/req", "syscalls/req", true, "syscalls"),
    total("allocations", "allocs/req", "allocs/req", true, "alloc"),
    total(
        "alloc_bytes",
        "alloc bytes/req",
        "alloc B/req",
        true,
        "alloc",
    ),
    total("frees", "frees/req", "frees/req", true, "alloc"),
    total("copy_bytes", "copy bytes/req", "copy B/req", true, "copy"),
    total("copy_calls", "copy calls/req", "copies/req", true, "copy"),
    total(
        "lock_acquisitions",
        "lock acquisitions/req",
        "locks/req",
        true,
        "locks",
    ),
    total(
        "contended",
        "contended/req",
        "contended/req",
        false,
        "locks",
    ),
    total(
        "page_faults",
        "page faults/req",
        "faults/req",
        true,
        "faults",
    ),
    total(
        "voluntary_cs",
        "voluntary cs/req",
        "vol cs/req",
        false,
        "sched",
    ),
    total(
        "involuntary_cs",
        "involuntary cs/req",
        "invol cs/req",
        false,
        "sched",
    ),
];

const fn total(
    field: &'static str,
    name: &'static str,
    label: &'static str,
    exact: bool,
    family: &'static str,
) -> Total {
    Total {
        field,
        name,
        label,
        exact,
        family,
    }
}

/// The exact per-request totals' names, in schema order (`rig gate` checks
/// a baseline's counter names against them).
pub fn exact_totals() -> impl Iterator<Item = &'static str> {
    PER_REQUEST.iter().filter(|t| t.exact).map(|t| t.name)
}

/// The probe families' names in the order report pages show them: those
/// counting what a request's own code calls (uprobes: alloc, copy, locks)
/// first, then the kernel's, each group in `probe::Family::ALL`'s order.
pub fn family_names() -> impl Iterator<Item = &'static str> {
    let mut all = crate::probe::Family::ALL;
    all.sort_by_key(|f| !f.uses_uprobes());
    all.into_iter().map(|f| f.name())
}

/// Is `name` (without a case key) a count of events (calls, syscalls,
/// faults, lock acquisitions), not bytes or instructions? Only the
/// counter's kind, before ` @ `, says: a site such as
/// `bytes::Bytes::copy_from_slice` is no bytes counter.
pub fn is_event_count(name: &str) -> bool {
    let kind = name.split_once(" @ ").map_or(name, |(k, _)| k);
    !is_instr(name) && !kind.contains("bytes") && !kind.contains(" summed")
}

/// The events counter a bytes counter is made of: `alloc bytes/req` →
/// `allocs/req`, `copy bytes/req` → `copy calls/req`, `KIND bytes @ SITE` →
/// `KIND calls @ SITE`, a user probe's `PROBE argN summed/req` → `PROBE
/// calls/req` (and `… @ SITE`) (case key kept).
pub fn events_of(name: &str) -> Option<String> {
    let (case, n) = split_case(name);
    let ev = match n {
        "alloc bytes/req" => "allocs/req".to_string(),
        "copy bytes/req" => "copy calls/req".to_string(),
        // A user probe's argument summed: `PROBE argN summed/req`.
        n if n.ends_with(" summed/req") => {
            let (probe, _) = n.rsplit_once(" arg")?;
            format!("{probe} calls/req")
        }
        n if n.contains(" summed @ ") => {
            let (kind, site) = n.split_once(" summed @ ")?;
            let (probe, _) = kind.rsplit_once(" arg")?;
            format!("{probe} calls @ {site}")
        }
        _ => {
            let (kind, site) = n.split_once(" bytes @ ")?;
            format!("{kind} calls @ {site}")
        }
    };
    Some(match case {
        Some(c) => format!("{c}: {ev}"),
        None => ev,
    })
}

/// Total instructions per request (perf or callgrind).
pub const INSTRUCTIONS: &str = "instructions/req";

/// Self instructions of one function per request (callgrind): `Ir @ NAME`.
pub const IR_SITE: &str = "Ir @ ";

/// Every total counter name: the eBPF totals of [`super::counted`]
/// and [`INSTRUCTIONS`]. Per-site names are checked by shape in
/// [`check_counter_name`].
pub fn totals() -> impl Iterator<Item = &'static str> {
    exact_totals().chain(std::iter::once(INSTRUCTIONS))
}

/// Is `name` (without a case key) an instruction counter?
pub fn is_instr(name: &str) -> bool {
    name == INSTRUCTIONS || name.starts_with(IR_SITE)
}

/// `"h1 /calib c1: allocs/req"` → `(Some("h1 /calib c1"), "allocs/req")`;
/// a bare name → `(None, name)`.
pub fn split_case(name: &str) -> (Option<&str>, &str) {
    match name.split_once(": ") {
        Some((case, rest)) if !case.contains(" @ ") && !case.starts_with("syscall ") => {
            (Some(case), rest)
        }
        _ => (None, name),
    }
}

/// The kinds a per-site counter names (`KIND calls @ SITE`): the C
/// allocation API, C++'s operators and the copy APIs, as the report names
/// them.
pub(crate) fn site_kinds() -> Vec<&'static str> {
    use rig_ebpf::abi::alloc_kind as k;
    let mut v: Vec<&'static str> = crate::runtime::alloc::C_NAMES.to_vec();
    v.extend(
        [
            k::CXX_NEW,
            k::CXX_NEW_ARRAY,
            k::CXX_DELETE,
            k::CXX_DELETE_ARRAY,
        ]
        .map(crate::runtime::alloc::kind_name),
    );
    v.extend(crate::runtime::copy_names());
    v
}

pub(crate) fn is_site(name: &str) -> bool {
    let name = split_case(name).1;
    name.contains(" @ ") || name.starts_with("syscall ")
}

/// Is `name` a counter rig can produce? A short message when not (what
/// counters are is [`counter_forms`], said once by the caller). A case
/// key (`h1 /calib c1: `) in front is allowed; whether it names a case of
/// the suite is checked once the suite is expanded.
pub fn check_counter_name(name: &str) -> Result<(), String> {
    let name = split_case(name).1;
    if totals().any(|t| t == name) {
        return Ok(());
    }
    if let Some(sc) = name.strip_prefix("syscall ") {
        if !sc.is_empty() && !sc.contains(' ') {
            return Ok(());
        }
    }
    if name.strip_suffix("/req").is_some_and(is_user_kind) {
        return Ok(());
    }
    if let Some((head, site)) = name.split_once(" @ ") {
        let kind_ok = if head == "faults"
            || head == "Ir"
            || is_user_kind(head)
            || is_application_kind(head)
        {
            true
        } else if let Some(sc) = head.strip_prefix("syscall ") {
            // A syscall by call site: `syscall recvfrom @ SITE`.
            !sc.is_empty() && !sc.contains(' ')
        } else if head.ends_with(" stack calls") || head.ends_with(" stack bytes") {
            // A whole stack: `EVENT stack calls @ SITE < CALLER < CALLER`.
            true
        } else if let Some(k) = head
            .strip_suffix(" calls")
            .or_else(|| head.strip_suffix(" bytes"))
        {
            // Copy kinds name the APIs sharing one implementation: `memcpy/memmove`.
            k.split('/').all(|part| {
                site_kinds().contains(&part)
                    || crate::runtime::alloc::entry_names()
                        .iter()
                        .any(|n| n == part)
            })
        } else {
            false
        };
        if kind_ok && !site.trim().is_empty() {
            return Ok(());
        }
    }
    let near: Vec<&str> = totals().filter(|t| edit_distance(t, name) <= 3).collect();
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean `{}`?)", near.join("` or `"))
    };
    Err(format!("unknown counter `{name}`{hint}"))
}

/// What counter names are, for the message about an unknown one.
pub fn counter_forms() -> String {
    format!(
        "counters are one of {} or a call site: \
         `KIND calls @ FUNCTION (FILE:LINE)`, `KIND bytes @ …` (KIND: {}), `faults @ …`, `syscall NAME`, \
         `syscall NAME @ SITE`, `EVENT stack calls @ SITE < CALLER < CALLER`, `EVENT stack bytes @ …`, \
         `Ir @ FUNCTION` (self instructions, callgrind); a probe you named (`--usdt`, `--func`): \
         `PROBE calls/req`, `PROBE argN summed/req`, `PROBE calls @ SITE`, `PROBE argN summed @ SITE`, \
         `PROBE calls @ argS=VALUE` (counted by a string argument, `--usdt …#S`) \
         (PROBE: `usdt:PROVIDER:NAME`, `func:NAME` or `LANGUAGE:calls`, `--interp-calls`); an application allocator's \
         `application NAME calls @ SITE`, `application NAME bytes @ SITE`; with several cases, \
         `CASE: COUNTER`",
        totals().collect::<Vec<_>>().join(", "),
        site_kinds().join(", ")
    )
}

/// A named probe's counter kind: `usdt:PROVIDER:NAME calls`, `func:NAME
/// calls`, either's `argN summed`, or `LANGUAGE:calls calls` (the names
/// `probe::user` gives).
fn is_user_kind(head: &str) -> bool {
    let probe = head.strip_suffix(" calls").or_else(|| {
        let (probe, arg) = head.strip_suffix(" summed")?.rsplit_once(" arg")?;
        arg.parse::<u8>().ok().map(|_| probe)
    });
    probe.is_some_and(|p| {
        let name = p.strip_prefix("usdt:").or_else(|| p.strip_prefix("func:"));
        name.is_some_and(|n| !n.is_empty() && !n.contains(' '))
            || p.strip_suffix(":calls")
                .is_some_and(|l| crate::runtime::CALL_LANGUAGES.contains(&l))
    })
}

/// The kind a per-site alloc counter names (`KIND calls @ SITE`): the
/// entry point, said as an application allocator's when its layer is one
/// (`application __pool_alloc`: its own names, not the C API's).
pub fn alloc_site_kind(kind: &str, allocator: Option<&str>) -> String {
    let application = crate::runtime::alloc::AllocFamily::Application.name();
    match allocator {
        Some(a) if a == application => format!("{application} {kind}"),
        _ => kind.to_string(),
    }
}

/// An application allocator's entry point (its own name, as the
/// application wrote it): `application NAME calls`, `application NAME
/// bytes`.
fn is_application_kind(head: &str) -> bool {
    let Some(rest) = head.strip_prefix("application ") else {
        return false;
    };
    let name = rest
        .strip_suffix(" calls")
        .or_else(|| rest.strip_suffix(" bytes"));
    name.is_some_and(|n| !n.is_empty() && !n.contains(' '))
}

/// Does a counter of this name sum a signed quantity (a marker's argument
/// may be negative), so a negative value is a value, not an error?
pub fn may_be_negative(name: &str) -> bool {
    split_case(name)
        .1
        .split(" @ ")
        .next()
        .unwrap_or("")
        .contains(" summed")
}

pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}
