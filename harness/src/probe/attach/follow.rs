//! Following a process tree: processes that join (forked, found at attach)
//! get the per-process probes, and the follower thread catches up with forks.

use super::*;

impl Followed {
    /// A pid seen in the counters without a record.
    pub fn unrecorded(pid: u32) -> Followed {
        Followed::new(
            pid,
            Joined::Forked {
                uprobe_gap_ms: None,
            },
            None,
        )
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

    /// Record `pid` and attach its uprobe families.
    pub(super) fn join(&mut self, pid: u32, joined: Joined) -> Result<(), ProbeError> {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return Err(ProbeError::NoSuchProcess { pid });
        }
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        self.stacks.install(&mut self.objects, pid, &maps)?;
        let mut a = Attacher {
            pid,
            copy_impls: &mut self.copy_impls,
            alloc_entries: &mut self.alloc_entries,
            alloc_unprobed: &mut self.alloc_unprobed,
            notes: &mut self.notes,
        };
        for (family, ebpf) in &mut self.objects {
            match family {
                Family::Alloc => a.attach_alloc(ebpf, &maps)?,
                Family::Copy => a.attach_copy(ebpf, &maps)?,
                Family::Locks => a.attach_locks(ebpf, &maps)?,
                Family::Syscalls | Family::Faults | Family::Sched | Family::Cpu => {}
            }
        }
        self.procs
            .insert(pid, Followed::new(pid, joined, Some(maps)));
        Ok(())
    }

    /// Join every tgid the kernel added to `targets` since the last look.
    pub(super) fn catch_up(&mut self) {
        let Some((family, ebpf)) = self.objects.first() else {
            return;
        };
        let Ok(found) = read::hash::<u32, u8>(ebpf, *family, "targets") else {
            return;
        };
        for tgid in found.into_keys() {
            if self.procs.contains_key(&tgid) {
                continue;
            }
            let seen = Instant::now();
            let uprobes = self
                .objects
                .iter()
                .any(|(f, _)| matches!(f, Family::Alloc | Family::Copy | Family::Locks));
            match self.join(
                tgid,
                Joined::Forked {
                    uprobe_gap_ms: None,
                },
            ) {
                Ok(()) => {
                    let gap = uprobes.then(|| seen.elapsed().as_secs_f64() * 1e3);
                    if let Some(p) = self.procs.get_mut(&tgid) {
                        p.joined = Joined::Forked { uprobe_gap_ms: gap };
                    }
                }
                Err(e) => {
                    // Gone already, or its uprobes would not attach: keep
                    // the record (its tracepoint counts are real) and why.
                    let mut f = Followed::new(
                        tgid,
                        Joined::Forked {
                            uprobe_gap_ms: None,
                        },
                        None,
                    );
                    f.error = Some(e.to_string());
                    self.procs.insert(tgid, f);
                }
            }
        }
    }
}

/// The follower thread: catch up with the kernel's fork-following until
/// told to stop.
pub(super) fn follow(shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(FOLLOW_POLL);
        shared.lock().unwrap_or_else(|e| e.into_inner()).catch_up();
    }
}
