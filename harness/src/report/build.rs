//! From a window's raw counters to an [`Attribution`]: every address named
//! (per process, with its own map), rows per call site summed over the
//! processes of a tree, per-process totals, and what was lost.

use std::collections::BTreeMap;

use rig_ebpf::abi::{ALLOC_CLASS_NULL_FREE, ALLOC_CLASS_UNSIZED, ALLOC_FLAG_INNER, FAULT_MAJOR};

use super::*;

/// One attribution being built: the window, the symbolizer, and the
/// per-process rows each family adds to.
pub(super) struct Builder<'a> {
    pub w: &'a Window,
    pub sym: &'a mut Symbolizer,
    pub procs: BTreeMap<u32, ProcessRow>,
}

impl<'a> Builder<'a> {
    pub fn new(w: &'a Window, sym: &'a mut Symbolizer) -> Builder<'a> {
        let procs = w
            .processes
            .iter()
            .map(|p| (p.pid, ProcessRow::new(p, w.pid)))
            .collect();
        Builder { w, sym, procs }
    }

    /// Name addresses; each is named with its own process's map.
    pub(super) fn callers(
        &mut self,
        addrs: Vec<(u32, u64)>,
        kind: AddrKind,
    ) -> BTreeMap<(u32, u64), Site> {
        let mut by_proc: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (tgid, a) in addrs {
            by_proc.entry(tgid).or_default().push(a);
        }
        let mut out = BTreeMap::new();
        for (tgid, addrs) in by_proc {
            let sites = self.sym.symbolize(self.w.maps_of(tgid), &addrs, kind);
            out.extend(addrs.into_iter().map(|a| (tgid, a)).zip(sites));
        }
        out
    }

    /// Syscalls by number, summed over processes.
    pub fn syscalls(&mut self) -> Vec<SyscallRow> {
        let d = &self.w.delta;
        let mut syscalls: BTreeMap<u32, SyscallRow> = BTreeMap::new();
        for (k, c) in &d.syscalls {
            let row = syscalls.entry(k.nr).or_insert_with(|| SyscallRow {
                nr: k.nr,
                name: syscall_name(k.nr),
                count: 0,
                returns: 0,
                ns: 0,
            });
            row.count += c.count;
            row.returns += c.exits;
            row.ns += c.ns;
            proc_row(&mut self.procs, k.tgid).syscalls += c.count;
        }
        let syscalls: Vec<SyscallRow> = syscalls.into_values().collect();

        syscalls
    }

    /// Allocator calls per site, api, allocator and size class; totals over
    /// the outermost calls only, and per allocator layer.
    pub fn alloc(&mut self) -> (Vec<AllocRow>, AllocTotals, Vec<AllocLayer>) {
        let w = self.w;
        let d = &w.delta;
        let sites = self.callers(
            d.alloc.keys().map(|k| (k.tgid, k.caller)).collect(),
            AddrKind::ReturnAddress,
        );
        let mut alloc: Vec<AllocRow> = Vec::new();
        let mut alloc_totals = AllocTotals::default();
        let mut layers: BTreeMap<String, AllocLayer> = BTreeMap::new();
        for (k, v) in &d.alloc {
            let site = sites[&(k.tgid, k.caller)].clone();
            let (kind, name, allocator) = alloc_call(k.kind, &w.alloc_entries);
            let inner = k.flags & ALLOC_FLAG_INNER != 0 || is_inner_alloc(kind, &site);
            let layer = layers
                .entry(allocator.clone())
                .or_insert_with(|| AllocLayer {
                    allocator: allocator.clone(),
                    ..Default::default()
                });
            let p = proc_row(&mut self.procs, k.tgid);
            let mut sums = vec![&mut layer.totals];
            let beside = is_application(kind);
            layer.beside_the_heap |= beside;
            let not_sized = k.size_class == ALLOC_CLASS_UNSIZED;
            if !inner && !beside {
                sums.push(&mut alloc_totals);
                sums.push(&mut p.alloc);
            }
            for t in sums {
                if kind == alloc_kind::GO_GC {
                    t.gc_cycles += v.calls;
                } else if k.size_class == ALLOC_CLASS_NULL_FREE {
                    t.null_frees += v.calls;
                } else if is_free(kind) {
                    t.frees += v.calls;
                } else {
                    t.allocations += v.calls;
                    t.bytes += v.bytes;
                    if not_sized {
                        t.not_sized += v.calls;
                    }
                }
            }
            if inner && is_free(kind) {
                layer.inner_frees += v.calls;
            } else if inner && k.size_class != ALLOC_CLASS_NULL_FREE {
                layer.inner_allocations += v.calls;
            }
            let row = AllocRow {
                site,
                kind: name,
                allocator,
                size_class: (k.size_class != ALLOC_CLASS_NULL_FREE && !not_sized)
                    .then_some(k.size_class),
                calls: v.calls,
                bytes: v.bytes,
                inner,
                not_sized,
                free: is_free(kind),
            };
            add_alloc_row(&mut alloc, row);
        }
        let alloc_layers: Vec<AllocLayer> = layers.into_values().collect();
        alloc.sort_by(|a, b| b.calls.cmp(&a.calls).then(b.bytes.cmp(&a.bytes)));

        (alloc, alloc_totals, alloc_layers)
    }

    /// Copy-routine calls and bytes per site, api and size bucket.
    pub fn copy(&mut self) -> Vec<CopyRow> {
        let w = self.w;
        let d = &w.delta;
        let sites = self.callers(
            d.copy.keys().map(|k| (k.tgid, k.caller)).collect(),
            AddrKind::ReturnAddress,
        );
        let mut copy: Vec<CopyRow> = Vec::new();
        for (k, v) in &d.copy {
            let imp = w.copy_impls.get(k.implementation as usize);
            let row = CopyRow {
                site: sites[&(k.tgid, k.caller)].clone(),
                kind: imp.map(|i| i.apis.join("/")).unwrap_or_else(|| "?".into()),
                implementation: imp.and_then(|i| i.impl_name.clone()),
                bucket: copy_bucket_name(k.bucket),
                calls: v.calls,
                bytes: v.bytes,
            };
            let p = proc_row(&mut self.procs, k.tgid);
            p.copy_calls += v.calls;
            p.copy_bytes += v.bytes;
            match copy.iter_mut().find(|r| {
                same_site(&r.site, &row.site) && r.kind == row.kind && r.bucket == row.bucket
            }) {
                Some(r) => {
                    r.calls += row.calls;
                    r.bytes += row.bytes;
                }
                None => copy.push(row),
            }
        }
        copy.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.calls.cmp(&a.calls)));

        copy
    }

    /// Mutex calls per site and mutex, per process.
    pub fn locks(&mut self) -> Vec<LockRow> {
        let d = &self.w.delta;
        // Lock rows stay per process: the same mutex address in two
        // processes is two mutexes.
        let sites = self.callers(
            d.locks.keys().map(|k| (k.tgid, k.caller)).collect(),
            AddrKind::ReturnAddress,
        );
        let mut locks: Vec<LockRow> = d
            .locks
            .iter()
            .map(|(k, v)| LockRow {
                site: sites[&(k.tgid, k.caller)].clone(),
                pid: k.tgid,
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
        for r in &locks {
            if r.op != "unlock" {
                proc_row(&mut self.procs, r.pid).lock_acquisitions += r.acquired;
            }
        }
        locks.sort_by_key(|r| std::cmp::Reverse(r.calls));

        locks
    }

    /// Page faults per site, kind and mode.
    pub fn faults(&mut self) -> Vec<FaultRow> {
        let d = &self.w.delta;
        // A user-mode fault's IP is the faulting instruction; a kernel-mode
        // one is named by the user PC after the syscall instruction.
        let user_ips: Vec<(u32, u64)> = d
            .faults
            .keys()
            .filter(|k| k.in_kernel == 0)
            .map(|k| (k.tgid, k.ip))
            .collect();
        let kernel_ips: Vec<(u32, u64)> = d
            .faults
            .keys()
            .filter(|k| k.in_kernel != 0)
            .map(|k| (k.tgid, k.ip))
            .collect();
        let user_sites = self.callers(user_ips, AddrKind::InstructionPointer);
        let kernel_sites = self.callers(kernel_ips, AddrKind::ReturnAddress);
        let mut faults: Vec<FaultRow> = Vec::new();
        for (k, &count) in &d.faults {
            let row = FaultRow {
                site: if k.in_kernel != 0 {
                    kernel_sites[&(k.tgid, k.ip)].clone()
                } else {
                    user_sites[&(k.tgid, k.ip)].clone()
                },
                major: k.kind == FAULT_MAJOR,
                in_kernel: k.in_kernel != 0,
                count,
            };
            proc_row(&mut self.procs, k.tgid).faults += count;
            match faults.iter_mut().find(|r| {
                same_site(&r.site, &row.site)
                    && r.major == row.major
                    && r.in_kernel == row.in_kernel
            }) {
                Some(r) => r.count += row.count,
                None => faults.push(row),
            }
        }
        faults.sort_by_key(|r| std::cmp::Reverse(r.count));

        faults
    }

    /// Context switches and off-CPU time per thread.
    pub fn sched(&mut self) -> SchedSection {
        let d = &self.w.delta;
        let mut sched = SchedSection::default();
        for (&tid, v) in &d.sched {
            let tgid = v.tgid as u32;
            sched.voluntary += v.voluntary;
            sched.involuntary += v.involuntary;
            sched.off_cpu_ns += v.off_cpu_ns;
            let p = proc_row(&mut self.procs, tgid);
            p.voluntary_switches += v.voluntary;
            p.involuntary_switches += v.involuntary;
            p.off_cpu_ns += v.off_cpu_ns;
            sched.threads.push(SchedThread {
                tid,
                pid: tgid,
                comm: std::fs::read_to_string(format!("/proc/{tgid}/task/{tid}/comm"))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default(),
                voluntary: v.voluntary,
                involuntary: v.involuntary,
                off_cpu_ns: v.off_cpu_ns,
            });
        }
        sched
    }

    /// The process rows, the window's root first.
    pub fn processes(self) -> Vec<ProcessRow> {
        let mut v: Vec<ProcessRow> = self.procs.into_values().collect();
        v.sort_by_key(|p| (p.pid != self.w.pid, p.pid));
        v
    }
}

/// On-CPU samples in user code and in the kernel, and those of them the
/// stacks place in rig's probe handling.
pub(super) fn cpu(w: &Window, stacks: &super::stacks::StackSection) -> CpuSamples {
    let d = &w.delta;
    CpuSamples {
        rig_probes: stacks
            .rows
            .iter()
            .filter(|r| r.family == Family::Cpu && r.rig_probes)
            .map(|r| r.count)
            .sum(),
        period_ns: crate::probe::attach::CPU_SAMPLE_PERIOD_NS,
        user: d
            .cpu
            .iter()
            .filter(|(k, _)| k.in_kernel == 0)
            .map(|(_, v)| v)
            .sum(),
        kernel: d
            .cpu
            .iter()
            .filter(|(k, _)| k.in_kernel != 0)
            .map(|(_, v)| v)
            .sum(),
    }
}

/// Per family, what the window missed: lost events, processes without
/// uprobes or that got them late, allocators rig could not probe.
pub(super) fn losses(
    w: &Window,
    counted: &super::AllocTotals,
    requests: Option<u64>,
) -> BTreeMap<Family, Vec<(String, u64)>> {
    let d = &w.delta;
    let mut losses: BTreeMap<Family, Vec<(String, u64)>> = d
        .losses()
        .into_iter()
        .map(|(f, l)| (f, l.into_iter().map(|(n, c)| (n.to_string(), c)).collect()))
        .collect();
    // A process whose uprobes could not be attached misses them all.
    let failed = w.processes.iter().filter(|p| p.error.is_some()).count();
    if failed > 0 {
        for f in &w.families {
            if f.uses_uprobes() {
                losses.entry(*f).or_default().push((
                    "processes without uprobes (see processes[].error)".to_string(),
                    failed as u64,
                ));
            }
        }
    }
    // A process forked during the window got its uprobes only when the
    // follower saw it: its first calls are missing, and how much is said.
    if let Some(c) = super::coverage::uprobe_coverage(w) {
        let why = super::coverage::coverage_text(&c);
        for f in &w.families {
            if f.uses_uprobes() {
                losses
                    .entry(*f)
                    .or_default()
                    .push((why.clone(), c.processes as u64));
            }
        }
    }
    // Code a measured process runs whose events of a family rig does not
    // count (Go's copies and locks, a managed runtime's own heap): named,
    // once per module, with how many processes map it (never a silent
    // zero). Each module is read once for all the families asked.
    let asked: Vec<Family> = w
        .families
        .iter()
        .copied()
        .filter(|f| matches!(f, Family::Alloc | Family::Copy | Family::Locks))
        .collect();
    let mut unseen: BTreeMap<(Family, String, String), u64> = BTreeMap::new();
    for maps in w.maps.values().filter(|_| !asked.is_empty()) {
        crate::runtime::each_module(maps, |m, at| {
            for f in &asked {
                for why in crate::runtime::unseen(m, at, f.name()) {
                    *unseen.entry((*f, at.path.to_string(), why)).or_default() += 1;
                }
            }
        });
    }
    for ((f, module, why), processes) in unseen {
        let line = match super::unseen::measured(w, f, &module, counted, requests) {
            Some(measured) => format!("{why} ({module}); {measured}"),
            None => format!("{why} ({module})"),
        };
        losses.entry(f).or_default().push((line, processes));
    }
    // A marker its runtime says does not fire as named (CPython 3.11's
    // function markers, which fire only while a profile function is set):
    // a window where it never fired is a silent zero, said; one where it
    // fired had what makes it fire.
    let fired = |probe: &str| {
        w.delta.user.iter().any(|(k, v)| {
            v.calls > 0
                && w.user_sites
                    .get(k.site as usize)
                    .is_some_and(|s| s.probe == probe)
        })
    };
    let mut caveats: Vec<String> = Vec::new();
    for s in w.user_sites.iter().filter(|s| !fired(&s.probe)) {
        if let Some(why) = &s.caveat {
            let line = format!("{}: {why}", s.probe);
            if !caveats.contains(&line) {
                caveats.push(line);
            }
        }
    }
    for line in caveats {
        losses.entry(Family::User).or_default().push((line, 1));
    }
    // An allocator the process uses but rig could not probe: its calls
    // are missing, so the family is incomplete (never a silent zero).
    if w.families.contains(&Family::Alloc) {
        for u in &w.alloc_unprobed {
            losses.entry(Family::Alloc).or_default().push((
                format!(
                    "allocator {} in {} (pid {}) not probed: {}",
                    u.allocator, u.module, u.pid, u.why
                ),
                1,
            ));
        }
    }
    losses
}

/// The sentence for a window whose target called io_uring_enter: the
/// reads, writes, accepts and sends it submitted are io_uring operations,
/// done by the kernel inside io_uring_enter or on the process's io-wq
/// threads, so the syscall table has only the submissions and waits.
pub(super) fn io_uring(syscalls: &[SyscallRow]) -> Option<String> {
    let calls: u64 = syscalls
        .iter()
        .filter(|r| r.name.starts_with("io_uring_"))
        .map(|r| r.count)
        .sum();
    (calls > 0).then(|| {
        "io_uring: the target submits I/O as io_uring operations; the reads, writes, accepts \
         and sends it asks for that way are not syscalls and are not in this table \
         (io_uring_enter counts its submissions and waits, not its operations)"
            .to_string()
    })
}

/// How the probes themselves bend what they measure, for the families on.
pub(super) fn distortions(w: &Window) -> Vec<String> {
    let mut distortions = Vec::new();
    if w.families.contains(&Family::Locks) {
        distortions.push(
            "locks: call_ns and hold_ns include the probes' own trap cost (a uprobe + \
             uretprobe around each lock, in Go code a uprobe at its entry and at its \
             return, a uprobe at unlock; see `rig probe-cost`); futex_wait_ns is measured \
             by tracepoints and is not inflated by uprobes (a Go slow path's wait is its \
             call's time, and is), but slower lock holders make contention more likely"
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

    distortions
}

/// A runtime whose every allocation passes through its own code (Go's)
/// names itself as the caller, not the code that asked
/// (`runtime::allocates_through`). Such rows are split by user site (the
/// first frame outside the runtime, as the stacks table names it), by
/// their exact per-stack counts; what no stack was taken for stays at the
/// runtime's caller.
pub(super) fn rows_by_user_site(
    alloc: Vec<AllocRow>,
    stacks: &super::stacks::StackSection,
) -> Vec<AllocRow> {
    let mut out: Vec<AllocRow> = Vec::new();
    let add = |row: AllocRow, out: &mut Vec<AllocRow>| add_alloc_row(out, row);
    for row in alloc {
        let in_runtime = row
            .site
            .function
            .as_deref()
            .is_some_and(crate::runtime::allocates_through);
        if !in_runtime || row.inner || !stacks.enabled {
            add(row, &mut out);
            continue;
        }
        let (mut calls, mut bytes) = (row.calls, row.bytes);
        for s in stacks.rows.iter().filter(|s| {
            s.family == Family::Alloc
                && !s.inner
                && s.event == row.kind
                && s.size_class == row.size_class
        }) {
            let Some(frames) = s.stack.as_ref().and_then(|id| stacks.stacks.get(id)) else {
                continue;
            };
            let (Some(caller), Some(user)) =
                (frames.frames.get(1), frames.frames.get(frames.user_site))
            else {
                continue;
            };
            if !super::same_site(caller, &row.site) || frames.user_site <= 1 || calls < s.count {
                continue;
            }
            calls -= s.count;
            bytes = bytes.saturating_sub(s.amount);
            add(
                AllocRow {
                    site: user.clone(),
                    calls: s.count,
                    bytes: s.amount,
                    ..row.clone()
                },
                &mut out,
            );
        }
        if calls > 0 {
            add(
                AllocRow {
                    calls,
                    bytes,
                    ..row
                },
                &mut out,
            );
        }
    }
    out.sort_by(|a, b| b.calls.cmp(&a.calls).then(b.bytes.cmp(&a.bytes)));
    out
}

/// Add `row` to the row of `rows` with its site, entry point, allocator,
/// size class and nesting, or as a row of its own.
fn add_alloc_row(rows: &mut Vec<AllocRow>, row: AllocRow) {
    match rows.iter_mut().find(|r| {
        super::same_site(&r.site, &row.site)
            && r.kind == row.kind
            && r.allocator == row.allocator
            && r.inner == row.inner
            && r.size_class == row.size_class
    }) {
        Some(r) => {
            r.calls += row.calls;
            r.bytes += row.bytes;
        }
        None => rows.push(row),
    }
}
