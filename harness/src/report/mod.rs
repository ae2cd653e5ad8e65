//! Reports: the attribution of one window, per call site with true names.
//!
//! In: a `probe::Window` (raw counters keyed by address), the number of
//! requests it contained, and the session's `Symbolizer`. Out: an
//! `Attribution` (plain, serializable, versioned) and its terminal table.

pub mod host;
pub mod table;

use std::collections::BTreeMap;

use rig_ebpf::abi::{alloc_kind, lock_op, ALLOC_CLASS_NULL_FREE, FAULT_MAJOR};
use serde::Serialize;

use crate::load::LoadResult;
use crate::probe::{syscall_name, AttachNote, CopyImpl, Family, Window, WindowEnd};
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
    pub alloc_totals: AllocTotals,
    pub copy_impls: Vec<CopyImpl>,
    pub copy: Vec<CopyRow>,
    pub locks: Vec<LockRow>,
    pub faults: Vec<FaultRow>,
    pub sched: SchedSection,
    /// Events each family lost (map full, failed reads...). Non-empty means
    /// the window is incomplete.
    pub losses: BTreeMap<Family, Vec<(String, u64)>>,
    /// Uretprobe trampoline syscalls seen in the target and not counted.
    pub probe_syscalls_excluded: u64,
    pub complete: bool,
    pub notes: Vec<AttachNote>,
    /// Which reported timings the probes themselves inflate.
    pub distortions: Vec<String>,
    /// Hardware instruction counters: present or not, and what the kernel
    /// said. Without them rig reports no instruction counts (never zero).
    pub pmu: host::Pmu,
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
}

#[derive(Clone, Debug, Serialize)]
pub struct SyscallRow {
    pub nr: u32,
    pub name: String,
    pub count: u64,
    pub returns: u64,
    pub ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AllocRow {
    pub site: Site,
    pub kind: &'static str,
    /// Sizes in (2^(class-1), 2^class]; `null` for free(NULL).
    pub size_class: Option<u32>,
    pub calls: u64,
    pub bytes: u64,
    /// A malloc/free made by operator new/delete itself (counted at the
    /// operator's caller instead; excluded from totals).
    pub inner: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AllocTotals {
    pub allocations: u64,
    pub bytes: u64,
    pub frees: u64,
    pub null_frees: u64,
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
    pub comm: String,
    pub voluntary: u64,
    pub involuntary: u64,
    pub off_cpu_ns: u64,
}

pub fn alloc_kind_name(kind: u32) -> &'static str {
    match kind {
        alloc_kind::MALLOC => "malloc",
        alloc_kind::CALLOC => "calloc",
        alloc_kind::REALLOC => "realloc",
        alloc_kind::FREE => "free",
        alloc_kind::POSIX_MEMALIGN => "posix_memalign",
        alloc_kind::MEMALIGN => "memalign",
        alloc_kind::ALIGNED_ALLOC => "aligned_alloc",
        alloc_kind::VALLOC => "valloc",
        alloc_kind::PVALLOC => "pvalloc",
        alloc_kind::CXX_NEW => "operator new",
        alloc_kind::CXX_NEW_ARRAY => "operator new[]",
        alloc_kind::CXX_DELETE => "operator delete",
        alloc_kind::CXX_DELETE_ARRAY => "operator delete[]",
        _ => "?",
    }
}

fn is_free(kind: u32) -> bool {
    matches!(
        kind,
        alloc_kind::FREE | alloc_kind::CXX_DELETE | alloc_kind::CXX_DELETE_ARRAY
    )
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

fn lock_op_name(op: u32) -> &'static str {
    match op {
        lock_op::LOCK => "lock",
        lock_op::TRYLOCK => "trylock",
        lock_op::UNLOCK => "unlock",
        _ => "?",
    }
}

impl Attribution {
    /// Name every address of `w` and lay the counters out per call site.
    pub fn build(
        w: &Window,
        requests: Option<u64>,
        load: Option<LoadResult>,
        sym: &mut Symbolizer,
    ) -> Attribution {
        let d = &w.delta;
        let mut callers = |addrs: Vec<u64>, kind: AddrKind| -> BTreeMap<u64, Site> {
            let sites = sym.symbolize(&w.maps, &addrs, kind);
            addrs.into_iter().zip(sites).collect()
        };

        let syscalls = d
            .syscalls
            .iter()
            .map(|(&nr, c)| SyscallRow {
                nr,
                name: syscall_name(nr),
                count: c.count,
                returns: c.exits,
                ns: c.ns,
            })
            .collect::<Vec<_>>();

        let sites = callers(
            d.alloc.keys().map(|k| k.caller).collect(),
            AddrKind::ReturnAddress,
        );
        let mut alloc: Vec<AllocRow> = d
            .alloc
            .iter()
            .map(|(k, v)| {
                let site = sites[&k.caller].clone();
                let inner = matches!(k.kind, alloc_kind::MALLOC | alloc_kind::FREE)
                    && site.function.as_deref().is_some_and(|f| {
                        f.starts_with("operator new") || f.starts_with("operator delete")
                    });
                AllocRow {
                    site,
                    kind: alloc_kind_name(k.kind),
                    size_class: (k.size_class != ALLOC_CLASS_NULL_FREE).then_some(k.size_class),
                    calls: v.calls,
                    bytes: v.bytes,
                    inner,
                }
            })
            .collect();
        alloc.sort_by(|a, b| b.calls.cmp(&a.calls).then(b.bytes.cmp(&a.bytes)));
        let mut alloc_totals = AllocTotals::default();
        for (k, v) in &d.alloc {
            let row_inner = alloc
                .iter()
                .any(|r| r.inner && r.site.addr == k.caller && r.kind == alloc_kind_name(k.kind));
            if row_inner {
                continue;
            }
            if k.size_class == ALLOC_CLASS_NULL_FREE {
                alloc_totals.null_frees += v.calls;
            } else if is_free(k.kind) {
                alloc_totals.frees += v.calls;
            } else {
                alloc_totals.allocations += v.calls;
                alloc_totals.bytes += v.bytes;
            }
        }

        let sites = callers(
            d.copy.keys().map(|k| k.caller).collect(),
            AddrKind::ReturnAddress,
        );
        let mut copy: Vec<CopyRow> = d
            .copy
            .iter()
            .map(|(k, v)| {
                let imp = w.copy_impls.get(k.implementation as usize);
                CopyRow {
                    site: sites[&k.caller].clone(),
                    kind: imp.map(|i| i.apis.join("/")).unwrap_or_else(|| "?".into()),
                    implementation: imp.and_then(|i| i.impl_name.clone()),
                    bucket: copy_bucket_name(k.bucket),
                    calls: v.calls,
                    bytes: v.bytes,
                }
            })
            .collect();
        copy.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.calls.cmp(&a.calls)));

        let sites = callers(
            d.locks.keys().map(|k| k.caller).collect(),
            AddrKind::ReturnAddress,
        );
        let mut locks: Vec<LockRow> = d
            .locks
            .iter()
            .map(|(k, v)| LockRow {
                site: sites[&k.caller].clone(),
                op: lock_op_name(k.op),
                mutex: k.mutex,
                calls: v.calls,
                acquired: v.acquired,
                contended: v.contended,
                futex_wait_ns: v.futex_wait_ns,
                call_ns: v.call_ns,
                holds: v.holds,
                hold_ns: v.hold_ns,
            })
            .collect();
        locks.sort_by_key(|r| std::cmp::Reverse(r.calls));

        // A user-mode fault's IP is the faulting instruction; a kernel-mode
        // one is named by the user PC after the syscall instruction.
        let user_ips: Vec<u64> = d
            .faults
            .keys()
            .filter(|k| k.in_kernel == 0)
            .map(|k| k.ip)
            .collect();
        let kernel_ips: Vec<u64> = d
            .faults
            .keys()
            .filter(|k| k.in_kernel != 0)
            .map(|k| k.ip)
            .collect();
        let user_sites = callers(user_ips, AddrKind::InstructionPointer);
        let kernel_sites = callers(kernel_ips, AddrKind::ReturnAddress);
        let mut faults: Vec<FaultRow> = d
            .faults
            .iter()
            .map(|(k, &count)| FaultRow {
                site: if k.in_kernel != 0 {
                    kernel_sites[&k.ip].clone()
                } else {
                    user_sites[&k.ip].clone()
                },
                major: k.kind == FAULT_MAJOR,
                in_kernel: k.in_kernel != 0,
                count,
            })
            .collect();
        faults.sort_by_key(|r| std::cmp::Reverse(r.count));

        let mut sched = SchedSection::default();
        for (&tid, v) in &d.sched {
            sched.voluntary += v.voluntary;
            sched.involuntary += v.involuntary;
            sched.off_cpu_ns += v.off_cpu_ns;
            sched.threads.push(SchedThread {
                tid,
                comm: std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", w.pid))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default(),
                voluntary: v.voluntary,
                involuntary: v.involuntary,
                off_cpu_ns: v.off_cpu_ns,
            });
        }

        let losses: BTreeMap<Family, Vec<(String, u64)>> = d
            .losses()
            .into_iter()
            .map(|(f, l)| (f, l.into_iter().map(|(n, c)| (n.to_string(), c)).collect()))
            .collect();
        let probe_syscalls_excluded = d
            .stats
            .values()
            .map(|s| s.slot[rig_ebpf::abi::stat::PROBE_SYSCALLS])
            .sum::<u64>();
        let mut distortions = Vec::new();
        if w.families.contains(&Family::Locks) {
            distortions.push(
                "locks: call_ns and hold_ns include the probes' own trap cost (a uprobe + \
                 uretprobe around each lock, a uprobe at unlock; see `rig probe-cost`); \
                 futex_wait_ns is measured by tracepoints and is not inflated by uprobes, \
                 but slower lock holders make contention more likely"
                    .to_string(),
            );
        }
        if w.families.contains(&Family::Syscalls)
            && w.families
                .iter()
                .any(|f| matches!(f, Family::Alloc | Family::Copy | Family::Locks))
        {
            distortions.push(
                "syscalls: per-call times are exact kernel times, but uprobes slow the user \
                 code between them; take timing from a pass without uprobes"
                    .to_string(),
            );
        }

        Attribution {
            schema_version: SCHEMA_VERSION,
            pid: w.pid,
            command: crate::target::cmdline(w.pid),
            families: w.families.clone(),
            window: WindowInfo {
                elapsed_ns: w.elapsed.as_nanos() as u64,
                end: w.end,
                requests,
                load,
                quiesced: None,
            },
            syscalls,
            alloc,
            alloc_totals,
            copy_impls: w.copy_impls.clone(),
            copy,
            locks,
            faults,
            sched,
            complete: losses.is_empty(),
            losses,
            probe_syscalls_excluded,
            notes: w.notes.clone(),
            distortions,
            pmu: host::detect_pmu(),
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
