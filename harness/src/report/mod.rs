//! Reports: the attribution of one window, per call site with true names.
//!
//! In: a `probe::Window` (raw counters keyed by address), the number of
//! requests it contained, and the session's `Symbolizer`. Out: an
//! `Attribution` (plain, serializable, versioned) and its terminal table.

mod build;
pub mod coverage;
pub mod flame;
mod interp;
pub mod live;
mod lock_ops;
pub mod output;
pub mod stacks;
pub mod table;
mod unseen;
pub mod user;

use std::collections::BTreeMap;

use rig_ebpf::abi::{alloc_kind, ALLOC_ENTRY_MASK, ALLOC_ENTRY_SHIFT, ALLOC_KIND_MASK};

pub use lock_ops::{
    is_lock_acquisition, is_lock_wait, lock_op_legend, lock_op_name, lock_wait_name,
};
use serde::Serialize;

use crate::load::LoadResult;
use crate::probe::{
    syscall_name, AllocEntry, AttachNote, CopyImpl, Family, Followed, Joined, Scope, Unprobed,
    Window, WindowEnd,
};
use crate::symbolize::{AddrKind, Site, Symbolizer};

/// Bumped on any incompatible change to the JSON below.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Attribution {
    pub schema_version: u32,
    pub pid: u32,
    pub command: String,
    pub families: Vec<Family>,
    pub window: WindowInfo,
    pub syscalls: Vec<SyscallRow>,
    pub alloc: Vec<AllocRow>,
    /// Calls that are not inside another allocator call: each request for
    /// memory once, whatever the layers.
    pub alloc_totals: AllocTotals,
    /// Per allocator layer (glibc, jemalloc, rust, cpython...): every call
    /// of that layer, with how many ran inside another allocator call.
    pub alloc_layers: Vec<AllocLayer>,
    /// Allocators found in a measured process that rig could not probe; any
    /// makes the alloc family incomplete.
    pub alloc_unprobed: Vec<Unprobed>,
    /// How often the allocator code the family does not count ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alloc_unseen: Vec<crate::probe::attach::UnseenCount>,
    pub copy_impls: Vec<CopyImpl>,
    pub copy: Vec<CopyRow>,
    pub locks: Vec<LockRow>,
    /// The probes a user named (`--usdt`, `--func`), each with its calls
    /// by call site.
    pub user: Vec<user::UserProbeRow>,
    pub faults: Vec<FaultRow>,
    pub sched: SchedSection,
    /// `process` (the pid alone) or `tree` (the pid and every process it
    /// forked, before or during the window).
    pub scope: Scope,
    /// One row per process measured (root first). The per-site tables
    /// above are summed over these processes.
    pub processes: Vec<ProcessRow>,
    /// Events each family lost (map full, failed reads...). Non-empty means
    /// the window is incomplete.
    pub losses: BTreeMap<Family, Vec<(String, u64)>>,
    /// Uretprobe trampoline syscalls seen in the target and not counted.
    pub probe_syscalls_excluded: u64,
    pub complete: bool,
    pub notes: Vec<AttachNote>,
    /// Which reported timings the probes themselves inflate.
    pub distortions: Vec<String>,
    /// When the target called io_uring_enter: its I/O was io_uring
    /// operations, which are not syscalls and are not in `syscalls`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_uring: Option<String>,
    /// Hardware instruction counters: present or not, and what the kernel
    /// said. Without them rig reports no instruction counts (never zero).
    pub pmu: crate::host::Pmu,
    /// The kernel the window ran on, what it offers the probe families and
    /// what the families gave up for what it lacks: a result from an old
    /// kernel says so.
    pub kernel: KernelSection,
    /// Whole stacks of every counted event, with exact counts per stack
    /// and the user site of each.
    pub stacks: stacks::StackSection,
    /// Sampled on-CPU time (the `cpu` family).
    pub cpu: CpuSamples,
    /// Processes forked into the tree during the window ran a while before
    /// their uprobes went in: how much of the window the alloc, copy and
    /// locks counts cover. `None` when no process joined during the window
    /// or no uprobe family ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uprobe_coverage: Option<coverage::UprobeCoverage>,
    /// `rig attach --live-heap`: blocks allocated in the window and still
    /// allocated at its end, by call site.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_heap: Option<live::LiveHeapSection>,
}

/// `kernel` of an attribution (`probe::kernel`).
#[derive(Clone, Debug, Serialize)]
pub struct KernelSection {
    pub version: String,
    pub features: crate::probe::kernel::Features,
    /// Empty on a kernel that lacks nothing the window's families use.
    pub degraded: Vec<crate::probe::kernel::Degraded>,
}

impl KernelSection {
    /// The running kernel, for `families`.
    pub fn of(families: &[Family]) -> KernelSection {
        let k = crate::probe::kernel::kernel();
        KernelSection {
            version: k.version.clone(),
            features: k.features,
            degraded: k.degraded(families),
        }
    }
}

/// On-CPU samples of the window: statistics (a sample every `period_ns` of
/// CPU time), not exact counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuSamples {
    pub period_ns: u64,
    /// Samples that interrupted the target's user code, and its kernel code.
    pub user: u64,
    pub kernel: u64,
    /// Of `user` + `kernel`, the samples (with stacks) that landed in rig's
    /// own probe handling: the single-stepped instruction of a uprobe, the
    /// kernel's uprobe handlers, rig's BPF programs. Rig's cost, shown
    /// apart from the server's code.
    #[serde(default)]
    pub rig_probes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct WindowInfo {
    pub elapsed_ns: u64,
    pub end: WindowEnd,
    /// Denominator for per-request values: successful requests in the window.
    pub requests: Option<u64>,
    pub load: Option<LoadResult>,
    /// Fixed-count windows: whether the target was still (no counter moving)
    /// at both boundaries. `false` means a background thread kept working,
    /// so counts of what it does are not exact per request.
    pub quiesced: Option<bool>,
    /// `--drive`: what rig's load spoke (protocol, connections, whether the
    /// server's certificate was verified) and the handshakes it made.
    pub drive: Option<String>,
    /// `rig attach -- COMMAND`: the command rig ran as the load, its exit
    /// status and the request count read from its output.
    pub command: Option<crate::load::tools::CommandRun>,
    /// Evidence that the window and the load were not the same interval
    /// (an idle target, a load that outlasted the window).
    pub warnings: Vec<String>,
    /// rig's own process and its children when they are inside the
    /// followed tree (`--pid` is an ancestor of rig, e.g. the shell that
    /// started it): left out of every count, never billed to the target.
    pub rig_excluded: Vec<u32>,
    /// `--drive`: other clients the target served during the window (the
    /// counts then hold their work too, divided by rig's requests only);
    /// such a window is not `complete`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_traffic: Option<OtherTraffic>,
}

/// Evidence that a driven window's target served clients other than rig.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct OtherTraffic {
    /// Client ports of connections to the target that were not rig's.
    pub client_ports: Vec<u16>,
    /// accept calls of the target in a window in which rig opened no
    /// connection.
    pub accepts: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SyscallRow {
    pub nr: u32,
    pub name: String,
    pub count: u64,
    pub returns: u64,
    pub ns: u64,
}

/// One allocator layer's calls in the window.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AllocLayer {
    pub allocator: String,
    /// Every call of this layer (inner ones included).
    pub totals: AllocTotals,
    /// An application's own allocator (pools): a layer beside the heap's,
    /// none of its calls in `alloc_totals`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub beside_the_heap: bool,
    /// Of those, calls made inside another allocator call.
    pub inner_allocations: u64,
    pub inner_frees: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AllocRow {
    pub site: Site,
    /// The entry point called (`malloc`, `mi_malloc_aligned`,
    /// `PyObject_Malloc`, `__rust_alloc`; `operator new` for C++).
    pub kind: String,
    /// The allocator layer the entry point belongs to (`glibc`, `jemalloc`,
    /// `tcmalloc`, `mimalloc`, `rust`, `cpython`, `libstdc++`).
    pub allocator: String,
    /// Sizes in (2^(class-1), 2^class]; `null` for free(NULL).
    pub size_class: Option<u32>,
    pub calls: u64,
    pub bytes: u64,
    /// A call made inside another allocator call (malloc by operator new,
    /// by pymalloc, jemalloc under a Rust shim): the outer call is counted
    /// at its caller; this one is excluded from `alloc_totals`.
    pub inner: bool,
    /// An allocation whose size rig cannot read (an application
    /// allocator with no size argument): `bytes` is unknown, not zero.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_sized: bool,
    /// A free (of any allocator: `free`, `operator delete`, a pool's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub free: bool,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AllocTotals {
    pub allocations: u64,
    pub bytes: u64,
    pub frees: u64,
    pub null_frees: u64,
    /// Completed garbage collections (Go: a garbage-collected heap has no
    /// frees; its cycles sit beside its allocations).
    #[serde(skip_serializing_if = "is_zero")]
    pub gc_cycles: u64,
    /// Of `allocations`, those whose size rig cannot read: `bytes` leaves
    /// them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub not_sized: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Serialize)]
pub struct CopyRow {
    pub site: Site,
    /// The APIs sharing the implementation that was hit, e.g. `memcpy/memmove`.
    pub kind: String,
    pub implementation: Option<String>,
    pub bucket: &'static str,
    pub calls: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LockRow {
    pub site: Site,
    /// The process holding the mutex (lock rows are never merged across
    /// processes: the same address in two processes is two mutexes).
    pub pid: u32,
    pub op: &'static str,
    pub mutex: u64,
    pub calls: u64,
    pub acquired: u64,
    pub contended: u64,
    pub futex_wait_ns: u64,
    pub call_ns: u64,
    pub holds: u64,
    pub hold_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FaultRow {
    pub site: Site,
    pub major: bool,
    /// Taken in the kernel on a user page (inside a syscall at `site`).
    pub in_kernel: bool,
    pub count: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SchedSection {
    pub voluntary: u64,
    pub involuntary: u64,
    pub off_cpu_ns: u64,
    pub threads: Vec<SchedThread>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SchedThread {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub voluntary: u64,
    pub involuntary: u64,
    pub off_cpu_ns: u64,
}

/// One process's share of the window.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    /// From its command line: nginx's `worker process`, postgres's
    /// `checkpointer`, else the program's name.
    pub role: String,
    pub command: String,
    pub root: bool,
    pub joined: Joined,
    /// Why this process's uprobes could not be attached, if so.
    pub error: Option<String>,
    pub syscalls: u64,
    pub alloc: AllocTotals,
    pub copy_calls: u64,
    pub copy_bytes: u64,
    pub lock_acquisitions: u64,
    pub faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub off_cpu_ns: u64,
}

impl ProcessRow {
    fn new(p: &Followed, root: u32) -> ProcessRow {
        ProcessRow {
            pid: p.pid,
            ppid: p.ppid,
            role: role(&p.command),
            command: p.command.clone(),
            root: p.pid == root,
            joined: p.joined,
            error: p.error.clone(),
            syscalls: 0,
            alloc: AllocTotals::default(),
            copy_calls: 0,
            copy_bytes: 0,
            lock_acquisitions: 0,
            faults: 0,
            voluntary_switches: 0,
            involuntary_switches: 0,
            off_cpu_ns: 0,
        }
    }

    /// A tgid with counts but no record (cannot happen unless the follower
    /// fell behind at the very end): still shown, never dropped.
    fn unknown(pid: u32) -> ProcessRow {
        let mut p = Followed::unrecorded(pid);
        p.error = Some("not recorded by the follower".into());
        ProcessRow::new(&p, 0)
    }
}

fn proc_row(procs: &mut BTreeMap<u32, ProcessRow>, tgid: u32) -> &mut ProcessRow {
    procs
        .entry(tgid)
        .or_insert_with(|| ProcessRow::unknown(tgid))
}

/// A process's role from its command line. Prefork servers retitle their
/// processes `name: role ...` (nginx `nginx: worker process`, postgres
/// `postgres: checkpointer`, php-fpm `php-fpm: pool www`): the role is what
/// follows `: `, up to the first path or option. Otherwise the program name.
pub fn role(command: &str) -> String {
    let first = command.split_whitespace().next().unwrap_or("?");
    if let Some((_, rest)) = command.split_once(": ") {
        if !first.contains('/') || first.ends_with(':') {
            let words: Vec<&str> = rest
                .split_whitespace()
                .take_while(|w| !w.starts_with('/') && !w.starts_with('-'))
                .collect();
            if !words.is_empty() {
                return words.join(" ");
            }
        }
    }
    first.rsplit('/').next().unwrap_or(first).to_string()
}

/// Whether two sites (possibly from different processes) are the same code:
/// same module and offset, or the same address outside any module.
pub(crate) fn same_site(a: &Site, b: &Site) -> bool {
    use crate::symbolize::Naming::Interpreted;
    if a.naming == Interpreted || b.naming == Interpreted {
        // An interpreted function: its code object, at the line it ran.
        return a.naming == b.naming && a.addr == b.addr && a.line == b.line;
    }
    match (&a.module, &b.module) {
        (Some(ma), Some(mb)) if !ma.starts_with('[') => {
            ma == mb && a.module_offset == b.module_offset
        }
        _ => a.module == b.module && a.addr == b.addr,
    }
}

pub use crate::runtime::alloc::kind_name as alloc_kind_name;

/// Internal names of the C library's allocator entry points (glibc), next
/// to the public ones (`alloc_kind_name` of MALLOC..=PVALLOC). glibc 2.36's
/// posix_memalign and memalign with alignment <= 16 call malloc, as does
/// realloc(NULL, n); realloc(p, 0) calls free.
const LIBC_ALLOC_INTERNALS: &[&str] = &[
    "_mid_memalign",
    "__libc_malloc",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_free",
    "__libc_memalign",
    "__posix_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
];

/// A malloc/free made by another allocator call on the caller's behalf:
/// by operator new/delete, or inside the C library's own allocator entry
/// points. The outer call is counted (at the caller's site); this one is
/// shown, marked `inner`, and left out of every total.
pub fn is_inner_alloc(kind: u32, site: &Site) -> bool {
    if !matches!(kind, alloc_kind::MALLOC | alloc_kind::FREE) {
        return false;
    }
    let Some(f) = site.function.as_deref() else {
        return false;
    };
    if f.starts_with("operator new") || f.starts_with("operator delete") {
        return true;
    }
    let in_libc = site
        .module
        .as_deref()
        .is_some_and(|m| m.rsplit('/').next().unwrap_or(m).starts_with("libc.so"));
    let public = (alloc_kind::MALLOC..=alloc_kind::PVALLOC).any(|k| alloc_kind_name(k) == f);
    in_libc && (public || LIBC_ALLOC_INTERNALS.contains(&f))
}

pub(crate) fn is_free(kind: u32) -> bool {
    matches!(
        kind,
        alloc_kind::FREE
            | alloc_kind::CXX_DELETE
            | alloc_kind::CXX_DELETE_ARRAY
            | alloc_kind::SDALLOCX
            | alloc_kind::DALLOCX
            | alloc_kind::RUST_DEALLOC
            | alloc_kind::POOL_FREE
    )
}

/// An application allocator's call (`runtime::pools`): its own layer,
/// beside the heap's totals.
pub(crate) fn is_application(kind: u32) -> bool {
    matches!(kind, alloc_kind::POOL_ALLOC | alloc_kind::POOL_FREE)
}

/// An `AllocKey::kind` (the attach cookie) taken apart: what the call does,
/// the entry point's name and its allocator layer.
pub fn alloc_call(cookie: u32, entries: &[AllocEntry]) -> (u32, String, String) {
    let kind = cookie & ALLOC_KIND_MASK;
    let entry = entries.get(((cookie >> ALLOC_ENTRY_SHIFT) & ALLOC_ENTRY_MASK) as usize);
    let cxx = (alloc_kind::CXX_NEW..=alloc_kind::CXX_DELETE_ARRAY).contains(&kind);
    let name = match entry {
        Some(e) if !cxx => e.symbol.clone(),
        _ => alloc_kind_name(kind).to_string(),
    };
    let layer = entry.map_or("glibc", |e| e.allocator.name()).to_string();
    (kind, name, layer)
}

pub fn copy_bucket_name(bucket: u32) -> &'static str {
    match bucket {
        0 => "<64",
        1 => "<1K",
        2 => "<16K",
        3 => ">=16K",
        _ => "?",
    }
}

impl Attribution {
    /// Name every address of `w` and lay the counters out per call site
    /// (summed over the processes of the tree) and per process.
    pub fn build(
        w: &Window,
        requests: Option<u64>,
        load: Option<LoadResult>,
        sym: &mut Symbolizer,
    ) -> Attribution {
        Attribution::build_with(w, requests, load, sym, &stacks::Wrappers::default())
    }

    /// `build`, naming user sites past `wrappers`.
    pub fn build_with(
        w: &Window,
        requests: Option<u64>,
        load: Option<LoadResult>,
        sym: &mut Symbolizer,
        wrappers: &stacks::Wrappers,
    ) -> Attribution {
        let stacks = stacks::StackSection::build(w, &w.copy_impls, sym, wrappers);
        let live_heap = w
            .live_heap
            .as_ref()
            .map(|h| live::LiveHeapSection::new(h, &w.maps, &w.alloc_entries, sym, &stacks));
        let mut b = build::Builder::new(w, sym);
        let syscalls = b.syscalls();
        let io_uring = build::io_uring(&syscalls);
        let (alloc, alloc_totals, alloc_layers) = b.alloc();
        let alloc = build::rows_by_user_site(alloc, &stacks);
        let copy = b.copy();
        let user = b.user(&stacks);
        let mut alloc_layers = alloc_layers;
        if w.families.contains(&Family::Alloc) {
            user::marker_layers(&mut alloc_layers, &user);
        }
        let locks = b.locks();
        let faults = b.faults();
        let sched = b.sched();
        let processes = b.processes();
        let losses = build::losses(w, &alloc_totals, requests);
        let probe_syscalls_excluded = w
            .delta
            .stats
            .values()
            .map(|s| s.slot[rig_ebpf::abi::stat::PROBE_SYSCALLS])
            .sum::<u64>();
        Attribution {
            schema_version: SCHEMA_VERSION,
            pid: w.pid,
            command: crate::process::cmdline(w.pid),
            families: w.families.clone(),
            window: WindowInfo {
                elapsed_ns: w.elapsed.as_nanos() as u64,
                end: w.end,
                requests,
                load,
                quiesced: None,
                drive: None,
                command: None,
                warnings: Vec::new(),
                rig_excluded: Vec::new(),
                other_traffic: None,
            },
            syscalls,
            alloc,
            alloc_totals,
            alloc_layers,
            alloc_unprobed: if w.families.contains(&Family::Alloc) {
                w.alloc_unprobed.clone()
            } else {
                Vec::new()
            },
            alloc_unseen: unseen::of_family(w, Family::Alloc),
            copy_impls: w.copy_impls.clone(),
            copy,
            locks,
            user,
            faults,
            sched,
            scope: w.scope,
            processes,
            complete: losses.is_empty(),
            losses,
            probe_syscalls_excluded,
            notes: w.notes.clone(),
            distortions: build::distortions(w),
            io_uring,
            pmu: crate::host::detect_pmu(),
            kernel: KernelSection::of(&w.families),
            cpu: build::cpu(w, &stacks),
            uprobe_coverage: coverage::uprobe_coverage(w),
            stacks,
            live_heap,
        }
    }

    /// Sum of a per-site counter over the rows at one function (test and
    /// report helper): e.g. calls of `malloc` made from `calib_alloc_small`.
    pub fn alloc_at(&self, function: &str, kind: &str) -> (u64, u64) {
        self.alloc
            .iter()
            .filter(|r| r.kind == kind && r.site.function.as_deref() == Some(function))
            .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
    }

    pub fn syscall(&self, name: &str) -> u64 {
        self.syscalls
            .iter()
            .find(|r| r.name == name)
            .map_or(0, |r| r.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::Naming;

    fn site(module: &str, offset: u64, function: &str) -> Site {
        Site {
            addr: 0x5000 + offset,
            module: Some(module.to_string()),
            module_offset: offset,
            build_id: None,
            function: Some(function.to_string()),
            function_offset: 4,
            file: None,
            line: None,
            inlined: Vec::new(),
            naming: Naming::Symbol,
        }
    }

    #[test]
    fn roles_come_from_retitled_command_lines() {
        assert_eq!(
            role("nginx: master process /usr/sbin/nginx -e stderr -p /tmp/x"),
            "master process"
        );
        assert_eq!(role("nginx: worker process"), "worker process");
        assert_eq!(role("postgres: checkpointer "), "checkpointer");
        assert_eq!(role("php-fpm: pool www"), "pool www");
        assert_eq!(role("/usr/bin/calib_server --port 0"), "calib_server");
        // A path argument with ": " in it is not a retitle.
        assert_eq!(role("/opt/srv/server --motd a: b"), "server");
    }

    #[test]
    fn allocator_calls_inside_the_c_library_allocator_are_inner() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        // glibc 2.36: posix_memalign(16) and realloc(NULL, n) call malloc.
        assert!(is_inner_alloc(
            alloc_kind::MALLOC,
            &site(libc, 0x10, "posix_memalign")
        ));
        assert!(is_inner_alloc(
            alloc_kind::MALLOC,
            &site(libc, 0x10, "_mid_memalign")
        ));
        assert!(is_inner_alloc(
            alloc_kind::FREE,
            &site(libc, 0x10, "__libc_realloc")
        ));
        assert!(is_inner_alloc(
            alloc_kind::MALLOC,
            &site("/x/libstdc++.so.6", 0x10, "operator new(unsigned long)")
        ));
        // The outer calls themselves, and a program's own function that
        // happens to be called malloc, are not.
        assert!(!is_inner_alloc(
            alloc_kind::POSIX_MEMALIGN,
            &site("/usr/sbin/nginx", 0x10, "ngx_memalign")
        ));
        assert!(!is_inner_alloc(
            alloc_kind::MALLOC,
            &site("/usr/sbin/nginx", 0x10, "ngx_alloc")
        ));
        assert!(!is_inner_alloc(
            alloc_kind::MALLOC,
            &site("/opt/app", 0x10, "posix_memalign")
        ));
        // reallocarray is not probed: its realloc is the only record.
        assert!(!is_inner_alloc(
            alloc_kind::REALLOC,
            &site(libc, 0x10, "reallocarray")
        ));
    }

    #[test]
    fn sites_in_two_processes_are_the_same_when_module_and_offset_are() {
        let a = site("/usr/sbin/nginx", 0x2ad57, "ngx_f");
        let mut b = a.clone();
        b.addr = 0x7777_0000; // another process, another load address
        assert!(same_site(&a, &b));
        b.module_offset = 0x2ad58;
        assert!(!same_site(&a, &b));
        let mut anon_a = a.clone();
        anon_a.module = None;
        let mut anon_b = anon_a.clone();
        anon_b.addr += 1;
        assert!(!same_site(&anon_a, &anon_b));
    }
}
