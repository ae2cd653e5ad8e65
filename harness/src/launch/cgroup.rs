//! Per-target cgroups: budgets (memory limit with swap 0, CPU quota) and
//! memory accounting (peak, OOM kills) for one launched process tree.
//!
//! In: limits and a label. Out: a [`Cgroup`] (owner; removes itself) and
//! cheap [`CgroupHandle`]s (paths) for the sample stage.
//!
//! Where: each cgroup is created under the cgroup rig itself runs in, per
//! hierarchy, so any budget placed on rig also binds its target. cgroup v2 is
//! used when rig's v2 cgroup offers the needed controllers and they can be
//! enabled for children; otherwise v1 (`memory`, and `cpu` for a quota).
//!
//! Names are `rig-<label>-<rig pid>-<n>`: a rig killed by SIGKILL cannot
//! clean up, so a later rig finds cgroups whose owner pid is dead and
//! removes them ([`reap_stale_cgroups`]).
//!
//! A budget that was asked for and cannot be set is an error: a run never
//! silently becomes "unlimited": numbers from an unlimited run compared with
//! a budgeted one would be wrong without saying so.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "{wanted} needs a writable cgroup, and none is available: {why}. \
         Run rig as root on a host with the cgroup v1 `memory`/`cpu` hierarchies \
         mounted or a delegated cgroup v2 subtree, or drop the budget flag"
    )]
    Unavailable { wanted: String, why: String },
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup {path} still has processes {pids:?} after SIGKILL; not removing it")]
    Busy { path: PathBuf, pids: Vec<u32> },
    #[error("invalid budget: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Budgets for one target.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub memory_mib: Option<u64>,
    /// CPU cores (e.g. 0.5).
    pub cpu_quota: Option<f64>,
}

impl Limits {
    fn any(&self) -> bool {
        self.memory_mib.is_some() || self.cpu_quota.is_some()
    }
    fn describe(&self) -> String {
        let mut w = Vec::new();
        if let Some(m) = self.memory_mib {
            w.push(format!("memory limit {m} MiB"));
        }
        if let Some(c) = self.cpu_quota {
            w.push(format!("CPU quota {c} cores"));
        }
        w.join(" and ")
    }
}

/// The paths of one cgroup (clone freely; reading only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CgroupHandle {
    pub version: CgroupVersion,
    pub name: String,
    /// Directory with the memory files (v2: the cgroup itself).
    pub memory_dir: Option<PathBuf>,
    /// Directory with cpu.stat / quota files (v1 `cpu` hierarchy; v2: the cgroup).
    pub cpu_dir: Option<PathBuf>,
    /// Every directory rig created for this cgroup (one per v1 hierarchy).
    pub dirs: Vec<PathBuf>,
}

impl CgroupHandle {
    /// Pids in the cgroup (union over hierarchies).
    pub fn procs(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self.dirs.iter().flat_map(|d| read_procs(d)).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The `cgroup.procs` files a new process must write itself into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }
}

fn read_procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// A cgroup rig created; removed (its processes killed first) on drop.
#[derive(Debug)]
pub struct Cgroup {
    handle: CgroupHandle,
    /// What was set and how (e.g. how swap 0 was obtained), for the manifest.
    pub notes: Vec<String>,
    removed: bool,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err("write", path))
}

/// Where a controller lives for rig: the directory of rig's own cgroup in
/// that hierarchy, and the hierarchy's mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub mount: PathBuf,
    pub own: PathBuf,
}

/// Mounts of `fstype` ("cgroup" or "cgroup2") in mountinfo text:
/// `(mount point, root within the hierarchy, super options)`.
pub fn parse_mountinfo(text: &str, fstype: &str) -> Vec<(PathBuf, String, Vec<String>)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split_whitespace().collect();
        let post: Vec<&str> = post.split_whitespace().collect();
        if pre.len() < 5 || post.len() < 3 || post[0] != fstype {
            continue;
        }
        out.push((
            PathBuf::from(pre[4]),
            pre[3].to_string(),
            post[2].split(',').map(str::to_string).collect(),
        ));
    }
    out
}

/// rig's cgroup path in the hierarchy whose controller list contains
/// `controller` (`""` means the v2 unified line `0::`).
pub fn parse_proc_cgroup(text: &str, controller: &str) -> Option<String> {
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        if hit {
            return Some(path.to_string());
        }
    }
    None
}

fn join_own(mount: &Path, mount_root: &str, own: &str) -> PathBuf {
    // A mount may show only a subtree (root != "/"); own paths are absolute
    // within the hierarchy.
    let rel = own
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(own);
    mount.join(rel.trim_start_matches('/'))
}

/// Where the v1 `controller` hierarchy is, as seen by rig.
pub fn v1_place(controller: &str) -> Option<Place> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (mount, root, _) = parse_mountinfo(&mi, "cgroup")
        .into_iter()
        .find(|(_, _, opts)| opts.iter().any(|o| o == controller))?;
    let own = parse_proc_cgroup(&cg, controller)?;
    Some(Place {
        own: join_own(&mount, &root, &own),
        mount,
    })
}

/// Where rig's cgroup v2 is.
pub fn v2_place() -> Option<Place> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let (mount, root, _) = parse_mountinfo(&mi, "cgroup2").into_iter().next()?;
    let own = parse_proc_cgroup(&cg, "")?;
    Some(Place {
        own: join_own(&mount, &root, &own),
        mount,
    })
}

/// Why v2 cannot host rig's cgroups here (None: it can).
fn v2_unusable(place: &Place, need_cpu: bool) -> Option<String> {
    let ctrls = std::fs::read_to_string(place.own.join("cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| ctrls.split_whitespace().any(|x| x == c);
    let mut needed = vec!["memory"];
    if need_cpu {
        needed.push("cpu");
    }
    let missing: Vec<&str> = needed.iter().copied().filter(|c| !has(c)).collect();
    if !missing.is_empty() {
        return Some(format!(
            "cgroup v2 at {} offers controllers [{}], missing {} (bound to v1 hierarchies?)",
            place.own.display(),
            ctrls.trim(),
            missing.join(", ")
        ));
    }
    // Enabling for children fails with EBUSY in a non-root cgroup that has
    // processes of its own (the "no internal processes" rule).
    let want: String = needed.iter().map(|c| format!("+{c} ")).collect();
    if let Err(e) = std::fs::write(place.own.join("cgroup.subtree_control"), want.trim()) {
        return Some(format!(
            "cannot enable {} for children of {}: {e}",
            needed.join(", "),
            place.own.display()
        ));
    }
    None
}

fn sanitize(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "target".into()
    } else {
        s
    }
}

/// `rig-<label>-<pid>-<n>` → owner pid.
pub fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("rig-")?;
    let mut it = rest.rsplitn(3, '-');
    let n = it.next()?;
    let pid = it.next()?;
    let _label = it.next()?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

impl Cgroup {
    /// Create the cgroup for one launch. Returns `Ok(None)` when no budget
    /// was asked for and no cgroup can be made (accounting is then
    /// unavailable; the caller notes it). Budgets that cannot be set are
    /// errors.
    pub fn create(label: &str, limits: Limits) -> Result<Option<Cgroup>, CgroupError> {
        if let Some(m) = limits.memory_mib {
            if m == 0 {
                return Err(CgroupError::Invalid(
                    "memory limit 0 MiB: give at least 1".into(),
                ));
            }
            // In bytes it must fit the kernel's counter: no limit by overflow.
            if m.checked_mul(1 << 20).is_none_or(|b| b > i64::MAX as u64) {
                return Err(CgroupError::Invalid(format!(
                    "memory limit {m} MiB: too large to set; give a limit the host has"
                )));
            }
        }
        if let Some(c) = limits.cpu_quota {
            if !(c.is_finite() && c >= 0.01) {
                return Err(CgroupError::Invalid(format!(
                    "CPU quota {c} cores: give at least 0.01 (the kernel's minimum quota is 1 ms per 100 ms period)"
                )));
            }
        }
        let name = format!(
            "rig-{}-{}-{}",
            sanitize(label),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let need_cpu = limits.cpu_quota.is_some();
        let mut why = Vec::new();
        if let Some(p) = v2_place() {
            match v2_unusable(&p, need_cpu) {
                None => return Self::create_v2(&p, name, limits).map(Some),
                Some(w) => why.push(w),
            }
        } else {
            why.push("no cgroup2 mount".into());
        }
        match Self::create_v1(name, limits) {
            Ok(cg) => Ok(Some(cg)),
            Err(e) => {
                why.push(e.to_string());
                if limits.any() {
                    Err(CgroupError::Unavailable {
                        wanted: limits.describe(),
                        why: why.join("; "),
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }

    fn create_v2(place: &Place, name: String, limits: Limits) -> Result<Cgroup, CgroupError> {
        let dir = place.own.join(&name);
        std::fs::create_dir(&dir).map_err(io_err("create cgroup", &dir))?;
        let mut cg = Cgroup {
            handle: CgroupHandle {
                version: CgroupVersion::V2,
                name,
                memory_dir: Some(dir.clone()),
                cpu_dir: Some(dir.clone()),
                dirs: vec![dir.clone()],
            },
            notes: vec![format!("cgroup v2 {}", dir.display())],
            removed: false,
        };
        if let Some(m) = limits.memory_mib {
            write(&dir.join("memory.max"), &(m << 20).to_string())?;
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
                cg.notes
                    .push(format!("memory.max = {m} MiB, memory.swap.max = 0"));
            } else {
                cg.notes.push(format!(
                    "memory.max = {m} MiB; no memory.swap.max (swap accounting off): swap is not limited"
                ));
            }
        }
        if let Some(c) = limits.cpu_quota {
            let quota = (c * 100_000.0).round() as u64;
            write(&dir.join("cpu.max"), &format!("{quota} 100000"))?;
            cg.notes
                .push(format!("cpu.max = {quota} 100000 ({c} cores)"));
        }
        Ok(cg)
    }

    fn create_v1(name: String, limits: Limits) -> Result<Cgroup, CgroupError> {
        let mem = v1_place("memory").ok_or_else(|| CgroupError::Unavailable {
            wanted: "memory accounting".into(),
            why: "no cgroup v1 `memory` hierarchy mounted".into(),
        })?;
        let mdir = mem.own.join(&name);
        std::fs::create_dir(&mdir).map_err(io_err("create cgroup", &mdir))?;
        // From here on, a failure drops `cg`, which removes what exists.
        let mut cg = Cgroup {
            handle: CgroupHandle {
                version: CgroupVersion::V1,
                name: name.clone(),
                memory_dir: Some(mdir.clone()),
                cpu_dir: None,
                dirs: vec![mdir.clone()],
            },
            notes: vec![format!("cgroup v1 memory {}", mdir.display())],
            removed: false,
        };
        if let Some(m) = limits.memory_mib {
            let bytes = (m << 20).to_string();
            // limit before memsw: memsw may never be below the memory limit.
            write(&mdir.join("memory.limit_in_bytes"), &bytes)?;
            let memsw = mdir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes)?;
                cg.notes.push(format!(
                    "memory.limit_in_bytes = memory.memsw.limit_in_bytes = {m} MiB (swap 0)"
                ));
            } else {
                write(&mdir.join("memory.swappiness"), "0")?;
                cg.notes.push(format!(
                    "memory.limit_in_bytes = {m} MiB; no memsw files (swapaccount off), so swap is \
                     only discouraged (memory.swappiness = 0), not forbidden"
                ));
            }
        }
        if let Some(c) = limits.cpu_quota {
            let cpu = v1_place("cpu").ok_or_else(|| CgroupError::Unavailable {
                wanted: format!("CPU quota {c} cores"),
                why: "no cgroup v1 `cpu` hierarchy mounted".into(),
            })?;
            let cdir = cpu.own.join(&name);
            std::fs::create_dir(&cdir).map_err(io_err("create cgroup", &cdir))?;
            cg.handle.dirs.push(cdir.clone());
            cg.handle.cpu_dir = Some(cdir.clone());
            let quota = (c * 100_000.0).round() as u64;
            write(&cdir.join("cpu.cfs_period_us"), "100000")?;
            write(&cdir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            cg.notes.push(format!(
                "cgroup v1 cpu {}: cfs_quota_us = {quota} per cfs_period_us = 100000 ({c} cores)",
                cdir.display()
            ));
        }
        Ok(cg)
    }

    pub fn handle(&self) -> CgroupHandle {
        self.handle.clone()
    }

    /// SIGKILL every process in the cgroup; wait up to `patience` for it to
    /// empty. Only rig's target and its descendants are ever in here.
    pub fn kill_all(&self, patience: Duration) -> Vec<u32> {
        kill_dirs(&self.handle.dirs, patience)
    }

    /// Kill what is left and remove the directories (retrying briefly: the
    /// kernel releases a cgroup asynchronously after its last task exits).
    pub fn remove(&mut self) -> Result<(), CgroupError> {
        if self.removed {
            return Ok(());
        }
        remove_dirs(&self.handle.dirs)?;
        self.removed = true;
        Ok(())
    }

    pub fn is_removed(&self) -> bool {
        self.removed
    }
}

fn kill_dirs(dirs: &[PathBuf], patience: Duration) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        for d in dirs {
            let kill = d.join("cgroup.kill");
            if kill.exists() {
                let _ = std::fs::write(&kill, "1");
            }
        }
        let left: Vec<u32> = dirs.iter().flat_map(|d| read_procs(d)).collect();
        if left.is_empty() || t0.elapsed() > patience {
            return left;
        }
        for &p in &left {
            // SAFETY: plain syscall; p is a member of a cgroup rig created.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kill every process in `dirs` (cgroups rig created), then rmdir them.
pub(crate) fn remove_dirs(dirs: &[PathBuf]) -> Result<(), CgroupError> {
    let left = kill_dirs(dirs, Duration::from_secs(2));
    for d in dirs {
        if !d.exists() {
            continue;
        }
        let t0 = Instant::now();
        loop {
            match std::fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if t0.elapsed() < Duration::from_secs(2) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(source) => {
                    if !left.is_empty() {
                        return Err(CgroupError::Busy {
                            path: d.clone(),
                            pids: left,
                        });
                    }
                    return Err(CgroupError::Io {
                        what: "remove cgroup",
                        path: d.clone(),
                        source,
                    });
                }
            }
        }
    }
    Ok(())
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            log::warn!("{e}");
        }
    }
}

/// Remove `rig-*` cgroups whose owning rig process is dead (left by a rig
/// that was SIGKILLed, which no handler can catch): kill what runs in them,
/// then rmdir. Looks in rig's own cgroup and at each hierarchy's root.
/// Returns the directories removed.
pub fn reap_stale_cgroups() -> Vec<PathBuf> {
    let mut parents: Vec<PathBuf> = Vec::new();
    for p in ["memory", "cpu"]
        .iter()
        .filter_map(|c| v1_place(c))
        .chain(v2_place())
    {
        for d in [p.own, p.mount] {
            if !parents.contains(&d) {
                parents.push(d);
            }
        }
    }
    let mut removed = Vec::new();
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(owner) = owner_of(&name) else {
                continue;
            };
            if Path::new(&format!("/proc/{owner}")).exists() || !e.path().is_dir() {
                continue;
            }
            match remove_dirs(&[e.path()]) {
                Ok(()) => removed.push(e.path()),
                Err(err) => log::warn!("stale cgroup: {err}"),
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
";
    const CGROUP: &str = "4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n";

    #[test]
    fn finds_hierarchies_and_own_paths() {
        let v1 = parse_mountinfo(MOUNTINFO, "cgroup");
        assert_eq!(v1.len(), 2);
        assert_eq!(v1[1].0, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(v1[1].2.iter().any(|o| o == "cpu"));
        assert_eq!(parse_mountinfo(MOUNTINFO, "cgroup2").len(), 1);
        assert_eq!(
            parse_proc_cgroup(CGROUP, "memory").as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(parse_proc_cgroup(CGROUP, "cpuacct").as_deref(), Some("/"));
        assert_eq!(parse_proc_cgroup(CGROUP, "").as_deref(), Some("/"));
        assert_eq!(parse_proc_cgroup(CGROUP, "pids"), None);
        assert_eq!(
            join_own(Path::new("/m"), "/", "/process_api/abc"),
            Path::new("/m/process_api/abc")
        );
        assert_eq!(join_own(Path::new("/m"), "/a", "/a/b"), Path::new("/m/b"));
    }

    #[test]
    fn owner_pid_from_name() {
        assert_eq!(owner_of("rig-calib-1234-0"), Some(1234));
        assert_eq!(owner_of("rig-my-label-1234-7"), Some(1234));
        assert_eq!(owner_of("rig-x-y"), None);
        assert_eq!(owner_of("other-1-2"), None);
    }

    #[test]
    fn labels_are_sanitized() {
        assert_eq!(sanitize("a b/c"), "a_b_c");
        assert_eq!(sanitize(""), "target");
    }
}
