//! The user family's probes (`--usdt`, `--func`) in one process: the
//! specs resolved against its map (`probe::user`), each site's argument
//! location written to `user_args` under its index (the attach cookie),
//! and the probe attached: a function's placed past the instructions that
//! leave the stack alone (an IFUNC's on the implementation the process
//! chose), a marker's on its `nop`, and a marker with a semaphore through
//! a uprobe whose reference counter the kernel raises
//! (`probe::usdt::GuardedUprobe`).

use std::os::fd::{AsFd, OwnedFd};

use aya::maps::Array;

use super::*;
use crate::probe::usdt::GuardedUprobe;
use crate::probe::user::{self as spec, SiteAt, UserProbe, UserSite};
use rig_ebpf::abi::{user_arg, UserArg, UserByArg};

/// The probes a user named, the sites they were found at, and the guarded
/// uprobes (with their links) that hold the semaphored ones.
pub(super) struct UserState {
    pub(super) probes: Vec<UserProbe>,
    pub(super) sites: Vec<UserSite>,
    pub(super) guarded: Vec<(GuardedUprobe, Option<OwnedFd>)>,
    /// Measuring a tree: the sites in its root's executable are probed in
    /// every process running it (see `attach_user`).
    tree: bool,
    /// Those sites, (module, file offset): the tree's other processes get
    /// no probe of their own there.
    everywhere: std::collections::BTreeSet<(String, u64)>,
}

impl UserState {
    pub(super) fn new(probes: &[UserProbe], tree: bool) -> UserState {
        UserState {
            probes: probes.to_vec(),
            sites: Vec::new(),
            guarded: Vec::new(),
            tree,
            everywhere: Default::default(),
        }
    }
}

impl Attacher<'_> {
    /// Resolve the user's probes in this process and attach each site. In
    /// the root process a spec that matches nothing is an error (the user
    /// misspelt it); in another process of the tree it is a note (a helper
    /// that runs other code).
    pub(super) fn attach_user(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
        root: bool,
    ) -> Result<(), ProbeError> {
        let family = Family::User;
        let r = spec::resolve(self.pid, maps, &self.user.probes)?;
        for (p, closest) in r.unmatched {
            if root {
                return Err(spec::no_match(self.pid, &p, closest).into());
            }
            self.note(
                family,
                p.spec(),
                format!("matches nothing in pid {}", self.pid),
            );
        }
        for n in r.notes {
            self.note(family, "user probes", n);
        }
        let mut here = std::collections::BTreeSet::new();
        // A tree's processes fork others (a postmaster forks a backend per
        // connection): a probe per process would miss what each forked one
        // does before its probes go in. The sites in the root's executable
        // are probed once for the file, in every process running it, and
        // the BPF program counts the tree's (its `targets`, which a fork
        // joins before the child first runs): a forked process is counted
        // from its first instruction. Not in shared libraries (a probe on
        // libc for every process would trap the whole machine), not for a
        // timed function (its return probe stays per process), and not on
        // kernels whose cookies are found by pid and address.
        let exe = maps.exe(self.pid);
        let everywhere_here = self.user.tree && root && !kernel::kernel().cookies_by_address();
        for mut site in r.sites {
            crate::probe::preload::interrupted()?;
            let open = maps.readable_path(&site.module);
            if site.ifunc {
                let name = site.probe.trim_start_matches("func:");
                match crate::probe::ifunc::resolve_ifunc(self.pid, maps, &site.module, name) {
                    Ok(r) => {
                        site.file_offset = r.file_offset;
                        site.ifunc = false;
                    }
                    Err(e) => {
                        self.note(
                            family,
                            site.probe.clone(),
                            format!("not probed: an IFUNC whose implementation rig could not resolve: {e:#}"),
                        );
                        continue;
                    }
                }
            }
            // Two IFUNCs can choose one implementation (memcpy and
            // memmove often do): one probe there, named by both
            // (`func:memcpy/memmove`, as the copy family names it), and
            // said; two would count every call twice.
            if let Some(first) = self
                .user
                .sites
                .iter_mut()
                .find(|s| s.module == site.module && s.file_offset == site.file_offset)
            {
                let name = site.probe.trim_start_matches("func:").to_string();
                let names = first.probe.trim_start_matches("func:");
                let alias = !names.split('/').any(|n| n == name);
                if alias {
                    first.probe = format!("{}/{name}", first.probe);
                }
                let both = first.probe.clone();
                if alias {
                    let why = format!(
                        "runs the same code as {both} ({}+{:#x}): one probe, counted once",
                        basename(&site.module),
                        site.file_offset
                    );
                    self.note(family, site.probe.clone(), why);
                }
                site.probe = both;
            }
            // One probe per place in this process, and none where the
            // root's probe on the file counts this process already.
            let place = (site.module.clone(), site.file_offset);
            if !here.insert(place.clone()) || self.user.everywhere.contains(&place) {
                continue;
            }
            site.everywhere =
                everywhere_here && !site.timed && exe.as_deref() == Some(site.module.as_str());
            let index = self.user_site(ebpf, &site)?;
            let program = site.at.program();
            let at = match site.at {
                SiteAt::FuncEntry => placement(family, program, &open, site.file_offset, &[])?,
                SiteAt::Marker | SiteAt::StackCheck | SiteAt::InterpCall => {
                    Placement::entry(site.file_offset)
                }
            };
            let what = format!(
                "{} ({}+{:#x})",
                site.probe,
                basename(&site.module),
                at.file_offset
            );
            if site.everywhere {
                let g = guarded_placed(
                    ebpf,
                    program,
                    &open,
                    at.file_offset,
                    site.semaphore.unwrap_or(0),
                    index,
                    None,
                )?;
                self.user.guarded.push(g);
                self.user.everywhere.insert(place);
                self.note(
                    family,
                    what,
                    "uprobe on the file for every process running it, counted for the tree's \
                     (a process it forks from its first instruction); another process running \
                     the same program takes its trap too, and its semaphore raised",
                );
                continue;
            }
            match site.semaphore {
                Some(sema) => {
                    let g = guarded_placed(
                        ebpf,
                        program,
                        &open,
                        at.file_offset,
                        sema,
                        index,
                        Some(self.pid),
                    )?;
                    self.user.guarded.push(g);
                    self.planned.push(Planned {
                        family,
                        program: program.to_string(),
                        lib: open.clone(),
                        placement: at,
                        cookie: Some(index),
                        semaphore: Some(sema),
                    });
                    self.note(family, what, "uprobe on the marker; its semaphore raised by the kernel while rig is attached");
                }
                None => {
                    // The return probe first, at the entry probe's place: a
                    // call the entry probe sees is one whose return the
                    // return probe sees too.
                    if site.timed {
                        self.place(ebpf, family, "rig_user_ret", &open, at.clone(), Some(index))?;
                    }
                    let at = self.place(ebpf, family, program, &open, at, Some(index))?;
                    let timed = if site.timed {
                        " and a return probe (the time inside)"
                    } else {
                        ""
                    };
                    let how = match site.at {
                        SiteAt::Marker => "uprobe on the marker".to_string(),
                        SiteAt::InterpCall => "uprobe on the interpreter's handler of the \
                                               instruction a call starts with: calls counted by \
                                               the function they enter, a generator's \
                                               resumptions passed over"
                            .to_string(),
                        SiteAt::StackCheck => {
                            "uprobe on its stack check (the pass that grows the stack not counted)"
                                .to_string()
                        }
                        SiteAt::FuncEntry => {
                            format!("uprobe at its entry{}{timed}", moved(&at, site.file_offset))
                        }
                    };
                    self.note(family, what, how);
                }
            }
        }
        Ok(())
    }

    /// The index of `site` in the probe set's table (added, with its
    /// argument location in `user_args`, when new).
    fn user_site(&mut self, ebpf: &mut Ebpf, site: &UserSite) -> Result<u64, ProbeError> {
        let family = Family::User;
        if let Some(i) = self.user.sites.iter().position(|s| {
            s.module == site.module && s.file_offset == site.file_offset && s.probe == site.probe
        }) {
            return Ok(i as u64);
        }
        let i = self.user.sites.len();
        if i >= user_arg::SITES {
            return Err(spec::UserProbeError::TooMany {
                spec: "the user probes together".into(),
                pid: self.pid,
                count: i + 1,
                what: "sites",
            }
            .into());
        }
        let m = read::map_mut(ebpf, family, "user_args")?;
        let mut args: Array<_, UserArg> =
            Array::try_from(m).map_err(read::map_err(family, "user_args"))?;
        args.set(i as u32, site.arg_abi, 0)
            .map_err(read::map_err(family, "user_args"))?;
        if site.by.is_some() {
            let m = read::map_mut(ebpf, family, "user_by_args")?;
            let mut by: Array<_, UserByArg> =
                Array::try_from(m).map_err(read::map_err(family, "user_by_args"))?;
            by.set(i as u32, site.by_abi, 0)
                .map_err(read::map_err(family, "user_by_args"))?;
        }
        self.user.sites.push(site.clone());
        Ok(i as u64)
    }
}

/// A program of the user family on the marker at `file_offset` of `lib` in
/// `pid`, through a uprobe whose reference counter is the semaphore at
/// file offset `semaphore` (0: none): raised while the uprobe lives, in
/// every process it is installed in, lowered when rig closes it or dies.
/// `pid` `None`: in every process running `lib` (only where cookies go in
/// BPF links).
pub(super) fn guarded_placed(
    ebpf: &mut Ebpf,
    program: &str,
    lib: &Path,
    file_offset: u64,
    semaphore: u64,
    cookie: u64,
    pid: Option<u32>,
) -> Result<(GuardedUprobe, Option<OwnedFd>), ProbeError> {
    let family = Family::User;
    let what = format!("{}+{file_offset:#x}", lib.display());
    let err = |source| ProbeError::Guarded {
        what: what.clone(),
        source,
    };
    let prog = loaded_uprobe(ebpf, family, program)?
        .fd()
        .map_err(program_err(family, format!("program {program}")))?
        .try_clone()
        .map_err(err)?;
    let g = GuardedUprobe::open_in(lib, file_offset, semaphore, pid).map_err(err)?;
    if let (true, Some(pid)) = (kernel::kernel().cookies_by_address(), pid) {
        // No BPF link with a cookie before Linux 5.15: the compat object
        // finds the cookie by the address the probe fires at.
        insert_cookie(ebpf, family, pid, lib, file_offset, cookie)?;
        g.attach(prog.as_fd()).map_err(err)?;
        return Ok((g, None));
    }
    let link = g.attach_with_cookie(prog.as_fd(), cookie).map_err(err)?;
    Ok((g, Some(link)))
}

/// The user's probes and the markers the families count without the
/// user naming them, where the process's runtimes fire one (the JVM's
/// objects and collections, CPython's collections: `runtime::implied_markers`),
/// each said in a note; a marker the user named already is not added.
pub(super) fn with_implied(
    pid: u32,
    families: &[Family],
    named: &[crate::probe::user::UserProbe],
) -> (Vec<crate::probe::user::UserProbe>, Vec<AttachNote>) {
    use crate::probe::user::UserProbe;
    let mut probes = named.to_vec();
    let mut notes = Vec::new();
    let Ok(maps) = ProcMaps::read(pid) else {
        return (probes, notes);
    };
    let names: Vec<&'static str> = families.iter().map(|f| f.name()).collect();
    for (spec, family) in crate::runtime::implied_markers(&maps, &names) {
        let marker = spec.rsplitn(3, ':').take(2).collect::<Vec<_>>();
        let [name, provider] = marker[..] else {
            continue;
        };
        let name = name.split('#').next().unwrap_or(name);
        let Ok(p) = UserProbe::usdt(&spec) else {
            continue;
        };
        if names_marker(named, provider, name) {
            continue;
        }
        notes.push(AttachNote {
            family: Family::User,
            what: format!("usdt:{provider}:{name}"),
            note: format!("counted for the {family} family: the process's runtime fires it"),
        });
        probes.push(p);
    }
    (probes, notes)
}

/// Whether one of the user's probes names marker `provider:name`, by its
/// PROVIDER:NAME part, globs and all (`hotspot:*` names it): a marker
/// probed twice would count each call twice.
fn names_marker(named: &[crate::probe::user::UserProbe], provider: &str, name: &str) -> bool {
    let pn = format!("{provider}:{name}");
    named.iter().any(|p| match p {
        crate::probe::user::UserProbe::Usdt { pattern, .. } => {
            let parts: Vec<&str> = pattern.rsplitn(3, ':').collect();
            let rest = match parts[..] {
                [_, _, binary] => &pattern[binary.len() + 1..],
                _ => pattern.as_str(),
            };
            crate::probe::user::names::glob(rest, &pn)
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::names_marker;
    use crate::probe::user::UserProbe;

    #[test]
    fn a_marker_the_user_named_by_any_pattern_is_not_implied_again() {
        let named = |spec: &str| vec![UserProbe::usdt(spec).unwrap()];
        for spec in [
            "hotspot:object__alloc#1/2",
            "hotspot:*",
            "libjvm.so:hotspot:object__alloc",
            "*:object__*",
        ] {
            assert!(
                names_marker(&named(spec), "hotspot", "object__alloc"),
                "{spec}"
            );
        }
        for spec in ["hotspot:gc__begin", "python:*", "libjvm.so:hotspot:gc*"] {
            assert!(
                !names_marker(&named(spec), "hotspot", "object__alloc"),
                "{spec}"
            );
        }
        assert!(!names_marker(&[], "hotspot", "object__alloc"));
    }
}
