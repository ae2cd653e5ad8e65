//! Terminal rendering of an `Attribution`: one table per probe family, rows
//! per call site, values per request when the request count is known.

use std::fmt::Write as _;

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, ContentArrangement, Table};

use super::Attribution;
use crate::probe::Family;
use crate::stats::per_request;

mod layers;
mod stacks;
mod user;
pub use stacks::{short_name, stacks};

/// `v / per` with up to six decimals, or the raw count when `per` is unknown.
pub fn per(v: u64, per: Option<u64>) -> String {
    match (per, per_request(v, per)) {
        (_, None) => v.to_string(),
        // Exact in integers: no float rounding in a whole count.
        (Some(n), Some(_)) if v.is_multiple_of(n) => (v / n).to_string(),
        // Enough decimals that an inexact ratio never prints as an integer.
        (_, Some(x)) => {
            let s = format!("{x:.6}");
            s.trim_end_matches('0').to_string()
        }
    }
}

fn micros(ns: u64, count: u64) -> String {
    if count == 0 {
        "-".into()
    } else {
        format!("{:.2}", ns as f64 / count as f64 / 1000.0)
    }
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for i in 1..header.len() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

fn size_class(c: Option<u32>) -> String {
    match c {
        None => "NULL".into(),
        Some(0) => "<=1".into(),
        Some(c) if c < 10 => format!("<={}", 1u64 << c),
        Some(c) if c < 20 => format!("<={}K", 1u64 << (c - 10)),
        Some(c) => format!("<={}M", 1u64 << (c - 20)),
    }
}

/// Render the whole attribution, at most `top` rows per table.
pub fn render(a: &Attribution, top: usize) -> String {
    let n = a.window.requests;
    let unit = if n.is_some() { "/req" } else { "" };
    let mut out = String::new();
    header(&mut out, a, n);
    if !a.syscalls.is_empty() {
        syscalls(&mut out, a, top, n);
    }
    let families: [(Family, Section); 4] = [
        (Family::Alloc, allocations),
        (Family::Copy, copies),
        (Family::Locks, mutexes),
        (Family::Faults, faults),
    ];
    for (family, section) in families {
        if a.families.contains(&family) {
            section(&mut out, a, top, n);
        }
    }
    if a.families.contains(&Family::User) {
        user::user_probes(&mut out, a, top, n);
    }
    if let Some(h) = &a.live_heap {
        live_heap(&mut out, h, top);
    }
    if a.families.contains(&crate::probe::Family::Sched) {
        let s = &a.sched;
        let _ = writeln!(
            out,
            "\ncontext switches: {} voluntary{unit}, {} involuntary{unit}, off-CPU {:.1} µs{unit} (summed over {} threads)",
            per(s.voluntary, n),
            per(s.involuntary, n),
            s.off_cpu_ns as f64 / 1000.0 / n.unwrap_or(1).max(1) as f64,
            s.threads.len()
        );
    }
    if a.families.contains(&crate::probe::Family::Cpu) {
        let c = &a.cpu;
        let _ = writeln!(
            out,
            "\non-CPU (sampled every {} µs of CPU time): {} samples in user code, {} in the kernel{} \
             (≈ {:.1} µs{unit} of CPU; statistics, not exact counts)",
            c.period_ns / 1000,
            c.user,
            c.kernel,
            match c.rig_probes {
                0 => String::new(),
                p => format!("; {p} of them in rig's own probe handling (uprobe single-steps and handlers: rig's cost, not the server's)"),
            },
            (c.user + c.kernel) as f64 * c.period_ns as f64 / 1000.0 / n.unwrap_or(1).max(1) as f64
        );
    }
    out.push_str(&stacks(a, top.min(8), n));
    if !a.pmu.instructions {
        let _ = writeln!(
            out,
            "instructions: not counted ({}); this is not zero",
            a.pmu.detail
        );
    }
    for d in &a.distortions {
        let _ = writeln!(out, "note: {d}");
    }
    out
}

/// The window line, the load, and what makes the numbers below less than
/// exact (no quiet, lost events); the process tree when there is one.
fn header(out: &mut String, a: &Attribution, n: Option<u64>) {
    let _ = writeln!(
        out,
        "rig attach: pid {} ({}), {:.2} s window, {}{}",
        a.pid,
        a.command,
        a.window.elapsed_ns as f64 / 1e9,
        match n {
            Some(n) => format!("{n} successful requests; values are per request"),
            None => "no request count given (--per): values are window totals".into(),
        },
        match a.window.end {
            crate::probe::WindowEnd::Completed => "",
            crate::probe::WindowEnd::Interrupted => " [INTERRUPTED: partial window]",
            crate::probe::WindowEnd::TargetExited => " [TARGET EXITED during the window]",
        }
    );
    if let Some(l) = &a.window.load {
        // Sent means handed to a socket: requests a dead target's closed
        // connections never carried are not sent, and said apart.
        let not_sent: u64 = l.not_sent.values().sum();
        let _ = writeln!(
            out,
            "load: {} sent, {} succeeded, {} failed {:?}{}",
            l.sent,
            l.succeeded,
            l.failed(),
            l.errors,
            match not_sent {
                0 => String::new(),
                n => format!("; {n} of {} never sent {:?}", l.sent + n, l.not_sent),
            }
        );
    }
    load_lines(out, a);
    if a.window.quiesced == Some(false) {
        let _ = writeln!(
            out,
            "note: the target never went quiet around the window (a background thread?): \
             counts from such threads are not exact per request"
        );
    }
    for u in &a.alloc_unprobed {
        let _ = writeln!(
            out,
            "WARNING: pid {} allocates through {} ({}), which rig could not probe: {}. \
             Allocation counts miss its calls.",
            u.pid, u.allocator, u.module, u.why
        );
    }
    // One line per reason, with the families it took events from.
    let mut reasons: Vec<(&str, u64, Vec<String>)> = Vec::new();
    for (family, lost) in &a.losses {
        for (why, n) in lost {
            match reasons.iter_mut().find(|(w, _, _)| w == why) {
                Some(r) => r.2.push(family.to_string()),
                None => reasons.push((why, *n, vec![family.to_string()])),
            }
        }
    }
    for (why, n, families) in reasons {
        let _ = writeln!(out, "INCOMPLETE ({}): {why} [{n}]", families.join(", "));
    }

    if a.processes.len() > 1 {
        let _ = writeln!(
            out,
            "\nprocess tree: {} processes followed; per-site tables below are their sum\n{}",
            a.processes.len(),
            processes(a, n)
        );
    }
}

/// How the window got its load: rig's drive, or a load command with the
/// request count read from its output; and the warnings about the load.
fn load_lines(out: &mut String, a: &Attribution) {
    if let Some(d) = &a.window.drive {
        let _ = writeln!(out, "driven: {d}");
    }
    if let Some(c) = &a.window.command {
        let _ = writeln!(out, "load command: {} ({})", c.argv.join(" "), c.status());
        match (&c.count, &c.count_error) {
            (Some(n), _) => {
                let _ = writeln!(
                    out,
                    "requests: {} successful, read from {}'s output ({}); --per N overrides it",
                    n.requests,
                    n.tool.name(),
                    n.evidence.join("; ")
                );
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "requests: not read from the output: {why}");
            }
            (None, None) => {}
        }
    }
    for w in &a.window.warnings {
        let _ = writeln!(out, "WARNING: {w}");
    }
    if let Some((me, children)) = a.window.rig_excluded.split_first() {
        let _ = writeln!(
            out,
            "note: rig itself (pid {me}) and its {} child process(es) are inside pid {}'s tree \
             and are NOT measured",
            children.len(),
            a.pid
        );
    }
}

/// One family's table: appended to the output.
type Section = fn(&mut String, &Attribution, usize, Option<u64>);

/// Syscalls by count, with the mean time per call.
fn syscalls(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let mut t = table(&["syscall", &format!("calls{unit}"), "µs/call"]);
    let mut rows = a.syscalls.clone();
    rows.sort_by_key(|r| std::cmp::Reverse(r.count));
    for r in rows.iter().take(top) {
        t.add_row(vec![
            r.name.clone(),
            per(r.count, n),
            micros(r.ns, r.returns),
        ]);
    }
    let total: u64 = a.syscalls.iter().map(|r| r.count).sum();
    let _ = writeln!(
        out,
        "\nsyscalls: {} {unit} in total ({} uretprobe trampoline calls of rig's excluded)\n{t}",
        per(total, n),
        a.probe_syscalls_excluded
    );
    if let Some(note) = &a.io_uring {
        let _ = writeln!(out, "note: {note}");
    }
}

/// Allocation calls and bytes by call site, api and size class.
fn allocations(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let t_ = &a.alloc_totals;
    let mut t = table(&[
        "call site",
        "api",
        "size",
        &format!("calls{unit}"),
        &format!("bytes{unit}"),
    ]);
    for r in a.alloc.iter().take(top) {
        // The C library's malloc is the default; other layers say whose.
        let mut kind = if r.allocator == "glibc" || r.allocator == "libstdc++" {
            r.kind.clone()
        } else {
            format!("{} {}", r.allocator, r.kind)
        };
        if r.inner {
            kind.push_str(" (inner)");
        }
        let lower = r.kind.to_lowercase();
        // A free has no size; a free(NULL) frees nothing.
        let size = match (
            r.free
                || lower.contains("free")
                || lower.contains("delete")
                || lower.contains("dalloc"),
            r.size_class,
        ) {
            (true, None) => "NULL".to_string(),
            (true, Some(_)) => "-".to_string(),
            (false, _) if r.not_sized => "unsized".to_string(),
            (false, c) => size_class(c),
        };
        t.add_row(vec![
            r.site.label(),
            kind,
            size,
            per(r.calls, n),
            if r.not_sized {
                "?".to_string()
            } else {
                per(r.bytes, n)
            },
        ]);
    }
    // A garbage-collected heap (Go) frees nothing by call: its collections
    // sit beside its allocations instead.
    let gc = a.alloc_layers.iter().any(|l| l.allocator == "go");
    let frees = if gc {
        format!(
            "{} frees{unit} (garbage-collected heap: no frees; {} GC cycles{unit})",
            per(t_.frees, n),
            per(t_.gc_cycles, n)
        )
    } else {
        format!("{} frees{unit}", per(t_.frees, n))
    };
    let _ = writeln!(
        out,
        "\nallocations: {} allocs{unit}, {} bytes{unit}, {frees}\n{t}",
        per(t_.allocations, n),
        per(t_.bytes, n),
    );
    layers::beside_the_heap(out, a, n, unit);
    alloc_layers(out, a, n, unit);
}

/// memcpy/memmove/memset bytes by call site, with the implementations the probes sit on.
fn copies(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let mut t = table(&[
        "call site",
        "api",
        "size",
        &format!("calls{unit}"),
        &format!("bytes{unit}"),
    ]);
    for r in a.copy.iter().take(top) {
        t.add_row(vec![
            r.site.label(),
            r.kind.clone(),
            r.bucket.to_string(),
            per(r.calls, n),
            per(r.bytes, n),
        ]);
    }
    let total: u64 = a.copy.iter().map(|r| r.bytes).sum();
    let impls = a
        .copy_impls
        .iter()
        .map(|i| {
            let apis = i.apis.join("/");
            match i.impl_name.as_deref() {
                // A runtime's own routine is its own implementation.
                Some(name) if name == apis => apis,
                name => format!("{apis} -> {}", name.unwrap_or("[unnamed]")),
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        out,
        "\ncopies: {} bytes{unit} ({impls})\n{t}",
        per(total, n)
    );
}

/// Mutex calls, contention, futex wait and hold time by call site.
fn mutexes(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let mut t = table(&[
        "call site",
        "op",
        &format!("calls{unit}"),
        &format!("acquisitions{unit}"),
        &format!("contended{unit}"),
        "futex wait µs/acq",
        "futex wait µs/contended",
        "hold µs/acq*",
    ]);
    for r in a.locks.iter().take(top) {
        let (acquired, wait, wait_contended, hold) = if r.op == "unlock" {
            ("-".into(), "-".into(), "-".into(), "-".into())
        } else {
            (
                per(r.acquired, n),
                micros(r.futex_wait_ns, r.acquired),
                micros(r.futex_wait_ns, r.contended),
                micros(r.hold_ns, r.holds),
            )
        };
        t.add_row(vec![
            r.site.label(),
            r.op.to_string(),
            per(r.calls, n),
            acquired,
            per(r.contended, n),
            wait,
            wait_contended,
            hold,
        ]);
    }
    // The same words as the README's "What the counters mean".
    let mut legends: Vec<&str> = Vec::new();
    for l in a
        .locks
        .iter()
        .filter_map(|r| crate::report::lock_op_legend(r.op))
    {
        if !legends.contains(&l) {
            legends.push(l);
        }
    }
    let go: String = legends.iter().map(|l| format!("; {l}")).collect();
    let _ = writeln!(
        out,
        "\nmutexes: contended = a lock call that waited in the kernel (futex) at least once; \
         futex wait per acquisition and per contended acquisition{go}; * inflated by probe cost, \
         see below\n{t}"
    );
}

/// Page faults by site and kind.
fn faults(out: &mut String, a: &Attribution, top: usize, n: Option<u64>) {
    let unit = if n.is_some() { "/req" } else { "" };
    let mut t = table(&["site", "kind", &format!("faults{unit}")]);
    for r in a.faults.iter().take(top) {
        let kind = match (r.major, r.in_kernel) {
            (false, false) => "minor",
            (true, false) => "major",
            (false, true) => "minor, in syscall",
            (true, true) => "major, in syscall",
        };
        t.add_row(vec![r.site.label(), kind.to_string(), per(r.count, n)]);
    }
    let total: u64 = a.faults.iter().map(|r| r.count).sum();
    let _ = writeln!(out, "\npage faults: {}{unit}\n{t}", per(total, n));
}

/// A column of the process table: the family it needs, its header, its value.
type Column = (
    crate::probe::Family,
    &'static str,
    fn(&super::ProcessRow) -> u64,
);

/// One row per process, then the tree's total; only the families attached.
fn processes(a: &Attribution, n: Option<u64>) -> Table {
    use crate::probe::Family as F;
    let fam = |f: F| a.families.contains(&f);
    let mut header = vec!["pid", "ppid", "role"];
    let cols: [Column; 7] = [
        (F::Syscalls, "syscalls", |p| p.syscalls),
        (F::Alloc, "allocs", |p| p.alloc.allocations),
        (F::Alloc, "alloc B", |p| p.alloc.bytes),
        (F::Alloc, "frees", |p| p.alloc.frees),
        (F::Copy, "copy B", |p| p.copy_bytes),
        (F::Locks, "locks", |p| p.lock_acquisitions),
        (F::Faults, "faults", |p| p.faults),
    ];
    let cols: Vec<_> = cols.into_iter().filter(|(f, _, _)| fam(*f)).collect();
    let sched = fam(F::Sched);
    header.extend(cols.iter().map(|(_, h, _)| *h));
    if sched {
        header.push("csw");
    }
    let mut t = table(&header);
    let mut sums = vec![0u64; cols.len() + 1];
    for p in &a.processes {
        let joined = match p.joined {
            crate::probe::Joined::Root => " (root)".to_string(),
            crate::probe::Joined::AtAttach => String::new(),
            crate::probe::Joined::Forked {
                uprobe_gap_ms,
                before_uprobes,
            } => {
                let gap =
                    uprobe_gap_ms.map_or(String::new(), |g| format!("; uprobes {g:.1} ms after"));
                let before = match before_uprobes.and_then(|b| b.syscalls) {
                    Some(n) => format!(", {n} syscalls before them"),
                    None => String::new(),
                };
                format!(" (forked during session{gap}{before})")
            }
        };
        let mut row = vec![
            p.pid.to_string(),
            p.ppid.to_string(),
            format!("{}{joined}", p.role),
        ];
        for (i, (_, _, get)) in cols.iter().enumerate() {
            sums[i] += get(p);
            row.push(per(get(p), n));
        }
        if sched {
            let csw = p.voluntary_switches + p.involuntary_switches;
            sums[cols.len()] += csw;
            row.push(per(csw, n));
        }
        t.add_row(row);
    }
    let mut total = vec!["tree".to_string(), String::new(), String::new()];
    total.extend(cols.iter().enumerate().map(|(i, _)| per(sums[i], n)));
    if sched {
        total.push(per(sums[cols.len()], n));
    }
    t.add_row(total);
    t
}

/// One line per allocator layer when there is more than one (pymalloc over
/// glibc, a Rust shim over mimalloc): each layer's own calls, of which inner
/// (made inside another allocator call, not in the totals above).
fn alloc_layers(out: &mut String, a: &Attribution, n: Option<u64>, unit: &str) {
    if a.alloc_layers.len() < 2 {
        return;
    }
    // Collections, where a layer is a garbage-collected heap's.
    let gc = a.alloc_layers.iter().any(|l| l.totals.gc_cycles > 0);
    let mut head = [
        "allocs",
        "bytes",
        "frees",
        "inner allocs",
        "inner frees",
        "GC cycles",
    ]
    .map(|h| format!("{h}{unit}"))
    .to_vec();
    head.truncate(if gc { 6 } else { 5 });
    head.insert(0, "allocator".to_string());
    let mut t = table(&head.iter().map(String::as_str).collect::<Vec<_>>());
    for l in &a.alloc_layers {
        let (s, i) = (&l.totals, [l.inner_allocations, l.inner_frees]);
        let mut row = vec![l.allocator.clone()];
        row.extend([s.allocations, s.bytes, s.frees, i[0], i[1], s.gc_cycles].map(|v| per(v, n)));
        row.truncate(head.len());
        t.add_row(row);
    }
    let _ = writeln!(
        out,
        "\nallocator layers (inner calls are counted once, by the outer layer)\n{t}"
    );
}

/// `--live-heap`: what the window allocated and did not free, by site
/// (whole numbers: blocks are not per request).
fn live_heap(out: &mut String, h: &crate::report::live::LiveHeapSection, top: usize) {
    let _ = writeln!(
        out,
        "\nlive heap at the window's end: {} B in {} blocks allocated in the window and not freed; \
         {} frees of blocks allocated before it (unmatched, not subtracted)",
        h.bytes, h.blocks, h.unmatched_frees
    );
    if !h.complete {
        let _ = writeln!(
            out,
            "INCOMPLETE: {} allocations ({} B) not recorded, the live-heap map was full",
            h.dropped, h.dropped_bytes
        );
    }
    for s in h.sites.iter().take(top) {
        let _ = writeln!(
            out,
            "{:>12} B {:>8} blocks  {} {}",
            s.bytes,
            s.blocks,
            s.kind,
            s.site.label()
        );
    }
    if !h.user_sites.is_empty() {
        let _ = writeln!(out, "live heap by user site (whole stacks):");
        for s in h.user_sites.iter().take(top) {
            let _ = writeln!(
                out,
                "{:>12} B {:>8} blocks  {}",
                s.bytes,
                s.blocks,
                s.site.label()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_request_values_are_exact_when_divisible() {
        assert_eq!(per(3000, Some(1000)), "3");
        assert_eq!(per(1500, Some(1000)), "1.5");
        assert_eq!(per(2001, Some(2000)), "1.0005");
        assert_eq!(per(7, None), "7");
    }

    #[test]
    fn short_names_keep_crate_type_and_method() {
        assert_eq!(
            super::short_name(
                "<hyper::proto::h1::dispatch::Server<S,hyper::body::incoming::Incoming> as hyper::proto::h1::dispatch::Dispatch>::poll_msg"
            ),
            "hyper::…::Server::poll_msg"
        );
        assert_eq!(
            super::short_name("http::header::map::HeaderMap<T>::try_reserve_one"),
            "http::…::HeaderMap::try_reserve_one"
        );
        assert_eq!(
            super::short_name("<&mio::net::tcp::stream::TcpStream as std::io::Read>::read"),
            "mio::…::TcpStream::read"
        );
        assert_eq!(super::short_name("level5"), "level5");
        assert_eq!(
            super::short_name("rig_peer::routes::respond"),
            "rig_peer::routes::respond"
        );
    }

    #[test]
    fn a_live_heap_that_lost_allocations_says_how_many() {
        let site = crate::symbolize::Site {
            addr: 0x5010,
            module: Some("/srv/conn_server".into()),
            module_offset: 0x1010,
            build_id: None,
            function: Some("conn_open".into()),
            function_offset: 0x1e,
            file: Some("/src/conn_server.c".into()),
            line: Some(89),
            inlined: Vec::new(),
            naming: crate::symbolize::Naming::Symbol,
        };
        let h = crate::report::live::LiveHeapSection {
            bytes: 3 * 65536,
            blocks: 3,
            sites: vec![crate::report::live::LiveSite {
                site,
                kind: "malloc".into(),
                allocator: "glibc".into(),
                blocks: 3,
                bytes: 3 * 65536,
            }],
            user_sites: Vec::new(),
            blocks_without_stack: 0,
            recorded: 5,
            unmatched_frees: 2,
            dropped: 7,
            dropped_bytes: 448,
            complete: false,
        };
        let mut out = String::new();
        live_heap(&mut out, &h, 10);
        assert_eq!(
            out,
            "\nlive heap at the window's end: 196608 B in 3 blocks allocated in the window and not \
             freed; 2 frees of blocks allocated before it (unmatched, not subtracted)\n\
             INCOMPLETE: 7 allocations (448 B) not recorded, the live-heap map was full\n\
             \x20     196608 B        3 blocks  malloc conn_open+0x1e (conn_server.c:89)\n"
        );
    }

    #[test]
    fn size_classes_read_as_upper_bounds() {
        assert_eq!(size_class(Some(5)), "<=32");
        assert_eq!(size_class(Some(13)), "<=8K");
        assert_eq!(size_class(None), "NULL");
    }
}
