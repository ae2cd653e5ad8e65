//! Following a process tree: processes that join (forked, found at attach)
//! get the per-process probes, and the follower thread catches up with forks.
//!
//! A forked process runs from its fork, and its uprobes (per process: see
//! the module above) go in only when the follower has seen it and attached
//! them. The gap is kept short (the follower looks every `FOLLOW_POLL`, and
//! a child with its parent's layout gets its parent's probes without
//! discovering them again) and measured where nothing is missed: the
//! kernel's fork time against the moment its last uprobe went in, the CPU
//! time it ran meanwhile, and (with the syscalls family) the syscalls it
//! made, which its `targets` value (pending until then) lets the kernel
//! count apart.

use super::*;

impl Followed {
    /// A pid seen in the counters without a record.
    pub fn unrecorded(pid: u32) -> Followed {
        Followed::new(pid, Joined::forked(), None)
    }

    pub(super) fn new(pid: u32, joined: Joined, maps: Option<ProcMaps>) -> Followed {
        let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| crate::process::parse_stat_ppid(&s))
            .unwrap_or(0);
        Followed {
            pid,
            ppid,
            command: crate::process::cmdline(pid),
            joined,
            maps,
            error: None,
        }
    }
}

impl Shared {
    /// Join `root` and the processes of its tree at attach (`pids`, root
    /// first). Only the root's failure is an error.
    pub(super) fn join_at_attach(&mut self, root: u32, pids: &[u32]) -> Result<(), ProbeError> {
        for &p in pids {
            crate::probe::preload::interrupted()?;
            let joined = if p == root {
                Joined::Root
            } else {
                Joined::AtAttach
            };
            match self.join(p, joined) {
                Ok(()) => {}
                Err(e) if p == root => return Err(e),
                Err(e @ ProbeError::Interrupted) => return Err(e),
                // A child that exited between the listing and now.
                Err(ProbeError::NoSuchProcess { .. } | ProbeError::Maps { .. }) => {}
                // A child whose uprobes cannot go in (a static helper, say):
                // its tracepoint counts are still real; the report says
                // what is missing.
                Err(e) => {
                    let mut f = Followed::new(p, joined, None);
                    f.error = Some(e.to_string());
                    self.procs.insert(p, f);
                }
            }
        }
        Ok(())
    }

    /// Record `pid` and attach its uprobe families: as planned for its
    /// layout when a process with the same one was attached before (a
    /// forked child), else found and placed anew (and planned).
    pub(super) fn join(&mut self, pid: u32, joined: Joined) -> Result<(), ProbeError> {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(ProbeError::NoSuchProcess { pid });
        }
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        self.stacks.install(&mut self.objects, pid, &maps)?;
        let layout = layout_of(&maps);
        match self.plans.iter().position(|p| p.layout == layout) {
            Some(i) => self.replay(i, pid)?,
            None => {
                let mut a = Attacher {
                    pid,
                    copy_impls: &mut self.copy_impls,
                    alloc_entries: &mut self.alloc_entries,
                    alloc_unprobed: &mut self.alloc_unprobed,
                    notes: &mut self.notes,
                    user: &mut self.user,
                    planned: Vec::new(),
                };
                for (family, ebpf) in &mut self.objects {
                    match family {
                        Family::Alloc => a.attach_alloc(ebpf, &maps, joined == Joined::Root)?,
                        Family::Copy => a.attach_copy(ebpf, &maps)?,
                        Family::Locks => a.attach_locks(ebpf, &maps)?,
                        Family::User => a.attach_user(ebpf, &maps, joined == Joined::Root)?,
                        Family::Syscalls | Family::Faults | Family::Sched | Family::Cpu => {}
                    }
                }
                let probes = a.planned;
                self.plans.push(Plan {
                    layout,
                    owner: pid,
                    probes,
                });
            }
        }
        let families: Vec<Family> = (self.objects.iter().map(|(f, _)| *f))
            .filter(|f| matches!(f, Family::Alloc | Family::Copy | Family::Locks))
            .collect();
        self.unseen.join(&families, pid, &maps);
        self.procs
            .insert(pid, Followed::new(pid, joined, Some(maps)));
        Ok(())
    }

    /// Attach plan `i`'s uprobes to `pid`, whose layout is the plan's.
    fn replay(&mut self, i: usize, pid: u32) -> Result<(), ProbeError> {
        let plan = &self.plans[i];
        for p in &plan.probes {
            crate::probe::preload::interrupted()?;
            let Some((_, ebpf)) = self.objects.iter_mut().find(|(f, _)| *f == p.family) else {
                continue;
            };
            let lib = reached_by(&p.lib, plan.owner, pid);
            match p.semaphore {
                Some(sema) => self.user.guarded.push(user::guarded_placed(
                    ebpf,
                    &p.program,
                    &lib,
                    p.placement.file_offset,
                    sema,
                    p.cookie.unwrap_or_default(),
                    Some(pid),
                )?),
                None => {
                    uprobe_placed(
                        ebpf,
                        p.family,
                        &p.program,
                        &lib,
                        p.placement.clone(),
                        p.cookie,
                        pid,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Join every tgid the kernel added to `targets` since the last look,
    /// then make it a plain member of the tree (its uprobes are in).
    pub(super) fn catch_up(&mut self) {
        let Some((family, ebpf)) = self.objects.first() else {
            return;
        };
        let Ok(found) = read::hash::<u32, u8>(ebpf, *family, "targets") else {
            return;
        };
        let fork_times = read::hash::<u32, u64>(ebpf, *family, "forked_at").unwrap_or_default();
        let uprobes = self.objects.iter().any(|(f, _)| f.uses_uprobes());
        for tgid in found.into_keys() {
            if self.procs.contains_key(&tgid) {
                continue;
            }
            match self.join(tgid, Joined::forked()) {
                Ok(()) => {
                    // The clock bpf_ktime_get_ns reads.
                    let live = monotonic_ns();
                    let cpu_ns = crate::process::cpu_ns(tgid);
                    for (family, ebpf) in &mut self.objects {
                        let _ = programs::set_target(ebpf, *family, tgid, TARGET_TREE);
                    }
                    let gap = fork_times
                        .get(&tgid)
                        .map(|&at| live.saturating_sub(at) as f64 / 1e6);
                    if let Some(p) = self.procs.get_mut(&tgid) {
                        p.joined = Joined::Forked {
                            uprobe_gap_ms: uprobes.then_some(gap).flatten(),
                            before_uprobes: uprobes.then(|| BeforeUprobes {
                                cpu_ms: cpu_ns as f64 / 1e6,
                                syscalls: None,
                            }),
                        };
                    }
                }
                Err(e) => {
                    // Gone already, or its uprobes would not attach: keep
                    // the record (its tracepoint counts are real) and why.
                    // It stays pending: every syscall it makes is one its
                    // uprobes did not see.
                    let mut f = Followed::new(tgid, Joined::forked(), None);
                    f.error = Some(e.to_string());
                    self.procs.insert(tgid, f);
                }
            }
        }
    }

    /// Fill in the syscalls each process forked into the tree made before
    /// its uprobes went in (the syscalls family counts them apart while its
    /// `targets` value is pending).
    pub(super) fn syscalls_before_uprobes(&mut self) {
        let Some((family, ebpf)) = self.objects.iter().find(|(f, _)| *f == Family::Syscalls) else {
            return;
        };
        let Ok(counts) = read::percpu_hash::<u32, u64>(ebpf, *family, "pending_syscalls") else {
            return;
        };
        for p in self.procs.values_mut() {
            if let Joined::Forked {
                before_uprobes: Some(b),
                ..
            } = &mut p.joined
            {
                b.syscalls = Some(counts.get(&p.pid).copied().unwrap_or(0));
            }
        }
    }
}

/// The executable file mappings of a process: (start, end, inode, offset).
fn layout_of(maps: &ProcMaps) -> Vec<(u64, u64, u64, u64)> {
    maps.mappings
        .iter()
        .filter(|m| m.is_exec() && m.is_file_backed())
        .map(|m| (m.start, m.end, m.inode, m.offset))
        .collect()
}

/// `lib` as process `pid` reaches it, when `owner` reached it through its
/// own `/proc/OWNER/...` (its root or its map_files: the same file, at the
/// same addresses in a forked child).
fn reached_by(lib: &Path, owner: u32, pid: u32) -> PathBuf {
    let prefix = PathBuf::from(format!("/proc/{owner}"));
    match lib.strip_prefix(&prefix) {
        Ok(rest) => PathBuf::from(format!("/proc/{pid}")).join(rest),
        Err(_) => lib.to_path_buf(),
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The follower thread: catch up with the kernel's fork-following until
/// told to stop.
pub(super) fn follow(shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(FOLLOW_POLL);
        shared.lock().unwrap_or_else(|e| e.into_inner()).catch_up();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_files_are_reached_through_its_own_proc_entries() {
        assert_eq!(
            reached_by(Path::new("/proc/10/root/usr/lib/libc.so.6"), 10, 42),
            PathBuf::from("/proc/42/root/usr/lib/libc.so.6")
        );
        assert_eq!(
            reached_by(Path::new("/proc/10/map_files/7f00-7f10"), 10, 42),
            PathBuf::from("/proc/42/map_files/7f00-7f10")
        );
        // Not the owner's: as it is (and /proc/100 is not /proc/10).
        assert_eq!(
            reached_by(Path::new("/proc/100/root/x"), 10, 42),
            PathBuf::from("/proc/100/root/x")
        );
        assert_eq!(
            reached_by(Path::new("/usr/lib/x"), 10, 42),
            PathBuf::from("/usr/lib/x")
        );
    }
}
