//! Loading and attaching each probe family to one target process.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use aya::maps::HashMap;
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{PerfEvent, RawTracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use rig_ebpf::abi::alloc_kind;
use serde::Serialize;

use super::placement::{safe_probe_offset, Placement};
use super::read;
use super::{Family, ProbeError, Snapshot};
use crate::symbolize::elf;
use crate::target::maps::ProcMaps;

/// A memcpy/memmove/memset implementation the copy probes attached to; its
/// index in `ProbeSet::copy_impls` is the attach cookie in `CopyKey`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CopyImpl {
    /// The APIs that resolve to this code (memcpy and memmove often share it).
    pub apis: Vec<String>,
    pub lib: String,
    pub file_offset: u64,
    /// Name of the implementation from debug info, e.g.
    /// `__memmove_avx_unaligned_erms`; `None` when no symbol covers it.
    pub impl_name: Option<String>,
    /// How the implementation was found (which GOT slot was read).
    pub method: String,
}

/// What was attached where, or deliberately not attached and why.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AttachNote {
    pub family: Family,
    pub what: String,
    pub note: String,
}

/// The loaded and attached probes of one session on one process.
pub struct ProbeSet {
    pid: u32,
    objects: Vec<(Family, Ebpf)>,
    pub copy_impls: Vec<CopyImpl>,
    pub notes: Vec<AttachNote>,
    /// Syscall-free uprobe kinds attached, for the cost table.
    pub families: Vec<Family>,
}

/// Probes need CAP_BPF and CAP_PERFMON; rig asks for root plainly.
pub fn require_root() -> Result<(), ProbeError> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(ProbeError::NotRoot { euid });
    }
    Ok(())
}

/// Checks that make a bad pid a clear error before anything is loaded.
pub fn check_target(pid: u32) -> Result<(), ProbeError> {
    require_root()?;
    if pid == std::process::id() {
        return Err(ProbeError::SelfTarget { pid });
    }
    let exe = Path::new("/proc").join(pid.to_string());
    if pid == 0 || !exe.exists() {
        return Err(ProbeError::NoSuchProcess { pid });
    }
    // Kernel threads have an empty maps file.
    match std::fs::read_to_string(exe.join("maps")) {
        Ok(m) if m.trim().is_empty() => Err(ProbeError::KernelThread { pid }),
        Ok(_) => Ok(()),
        Err(_) => Err(ProbeError::NoSuchProcess { pid }),
    }
}

impl ProbeSet {
    /// Load and attach `families` to `pid`. Every thread of the process is
    /// covered, including threads that existed before attaching.
    pub fn attach(pid: u32, families: &[Family]) -> Result<ProbeSet, ProbeError> {
        check_target(pid)?;
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        let mut set = ProbeSet {
            pid,
            objects: Vec::new(),
            copy_impls: Vec::new(),
            notes: Vec::new(),
            families: families.to_vec(),
        };
        for &family in families {
            let mut ebpf = load(family)?;
            add_target(&mut ebpf, family, pid)?;
            match family {
                Family::Syscalls => {
                    raw_tp(&mut ebpf, family, "rig_sys_enter", "sys_enter")?;
                    raw_tp(&mut ebpf, family, "rig_sys_exit", "sys_exit")?;
                }
                Family::Alloc => set.attach_alloc(&mut ebpf, &maps)?,
                Family::Copy => set.attach_copy(&mut ebpf, &maps)?,
                Family::Locks => set.attach_locks(&mut ebpf, &maps)?,
                Family::Faults => attach_faults(&mut ebpf)?,
                Family::Sched => raw_tp(&mut ebpf, family, "rig_sched_switch", "sched_switch")?,
            }
            set.objects.push((family, ebpf));
        }
        Ok(set)
    }

    /// One program of `family` at one libc function's entry (IFUNCs resolved
    /// to the implementation the target runs): for measuring what a single
    /// probe costs.
    pub fn attach_single(
        pid: u32,
        family: Family,
        program: &str,
        symbol: &str,
    ) -> Result<ProbeSet, ProbeError> {
        check_target(pid)?;
        let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
        let libc_maps_path = maps.libc_path().ok_or(ProbeError::NoLibc { pid, family })?;
        let libc = maps.open_path(&libc_maps_path);
        let resolve_err = |source| ProbeError::Resolve {
            pid,
            lib: libc_maps_path.clone(),
            api: symbol.to_string(),
            source,
        };
        let offset = elf::resolve_ifunc(pid, &maps, &libc_maps_path, symbol)
            .map_err(resolve_err)?
            .file_offset;
        let mut ebpf = load(family)?;
        add_target(&mut ebpf, family, pid)?;
        uprobe(&mut ebpf, family, program, &libc, offset, Some(1), pid)?;
        Ok(ProbeSet {
            pid,
            objects: vec![(family, ebpf)],
            copy_impls: Vec::new(),
            notes: Vec::new(),
            families: vec![family],
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Read every counter now.
    pub fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        let mut s = Snapshot::default();
        for (family, ebpf) in &self.objects {
            let f = *family;
            s.stats.insert(f, read::stats(ebpf, f)?);
            match f {
                Family::Syscalls => s.syscalls = read::percpu_array(ebpf, f, "sys_counts")?,
                Family::Alloc => s.alloc = read::percpu_hash(ebpf, f, "allocs")?,
                Family::Copy => s.copy = read::percpu_hash(ebpf, f, "copies")?,
                Family::Locks => s.locks = read::percpu_hash(ebpf, f, "locks")?,
                Family::Faults => s.faults = read::percpu_hash(ebpf, f, "faults")?,
                Family::Sched => s.sched = read::hash(ebpf, f, "sched_threads")?,
            }
        }
        Ok(s)
    }

    fn note(&mut self, family: Family, what: impl Into<String>, note: impl Into<String>) {
        self.notes.push(AttachNote {
            family,
            what: what.into(),
            note: note.into(),
        });
    }

    fn attach_alloc(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let libc = libc_path(maps, self.pid, family)?;
        // (symbol, program, cookie, required)
        let c_api: &[(&str, &str, u32, bool)] = &[
            ("malloc", "rig_alloc_arg1", alloc_kind::MALLOC, true),
            ("calloc", "rig_alloc_calloc", alloc_kind::CALLOC, true),
            ("realloc", "rig_alloc_arg2", alloc_kind::REALLOC, true),
            ("free", "rig_alloc_free", alloc_kind::FREE, true),
            (
                "posix_memalign",
                "rig_alloc_arg3",
                alloc_kind::POSIX_MEMALIGN,
                false,
            ),
            ("memalign", "rig_alloc_arg2", alloc_kind::MEMALIGN, false),
            (
                "aligned_alloc",
                "rig_alloc_arg2",
                alloc_kind::ALIGNED_ALLOC,
                false,
            ),
            ("valloc", "rig_alloc_arg1", alloc_kind::VALLOC, false),
            ("pvalloc", "rig_alloc_arg1", alloc_kind::PVALLOC, false),
        ];
        let mut done: Vec<(PathBuf, u64, String)> = Vec::new();
        self.attach_table(ebpf, family, &libc, c_api, &mut done)?;
        // C++ operator new/delete, when the process maps libstdc++.
        if let Some(cxx) = maps.find_object(|p| basename(p).starts_with("libstdc++.so")) {
            let cxx_path = maps.open_path(&cxx);
            let cxx_api: &[(&str, &str, u32, bool)] = &[
                ("_Znwm", "rig_alloc_arg1", alloc_kind::CXX_NEW, false),
                (
                    "_ZnwmRKSt9nothrow_t",
                    "rig_alloc_arg1",
                    alloc_kind::CXX_NEW,
                    false,
                ),
                (
                    "_ZnwmSt11align_val_t",
                    "rig_alloc_arg1",
                    alloc_kind::CXX_NEW,
                    false,
                ),
                (
                    "_ZnwmSt11align_val_tRKSt9nothrow_t",
                    "rig_alloc_arg1",
                    alloc_kind::CXX_NEW,
                    false,
                ),
                ("_Znam", "rig_alloc_arg1", alloc_kind::CXX_NEW_ARRAY, false),
                (
                    "_ZnamRKSt9nothrow_t",
                    "rig_alloc_arg1",
                    alloc_kind::CXX_NEW_ARRAY,
                    false,
                ),
                (
                    "_ZnamSt11align_val_t",
                    "rig_alloc_arg1",
                    alloc_kind::CXX_NEW_ARRAY,
                    false,
                ),
                ("_ZdlPv", "rig_alloc_free", alloc_kind::CXX_DELETE, false),
                ("_ZdlPvm", "rig_alloc_free", alloc_kind::CXX_DELETE, false),
                (
                    "_ZdlPvSt11align_val_t",
                    "rig_alloc_free",
                    alloc_kind::CXX_DELETE,
                    false,
                ),
                (
                    "_ZdlPvmSt11align_val_t",
                    "rig_alloc_free",
                    alloc_kind::CXX_DELETE,
                    false,
                ),
                (
                    "_ZdaPv",
                    "rig_alloc_free",
                    alloc_kind::CXX_DELETE_ARRAY,
                    false,
                ),
                (
                    "_ZdaPvm",
                    "rig_alloc_free",
                    alloc_kind::CXX_DELETE_ARRAY,
                    false,
                ),
                (
                    "_ZdaPvSt11align_val_t",
                    "rig_alloc_free",
                    alloc_kind::CXX_DELETE_ARRAY,
                    false,
                ),
            ];
            self.attach_table(ebpf, family, &cxx_path, cxx_api, &mut done)?;
        }
        Ok(())
    }

    /// Attach each (symbol, program, cookie) of `table` in `lib`, once per
    /// distinct code address: an alias (aligned_alloc = memalign in glibc
    /// 2.36) would otherwise fire two probes per call.
    fn attach_table(
        &mut self,
        ebpf: &mut Ebpf,
        family: Family,
        lib: &Path,
        table: &[(&str, &str, u32, bool)],
        done: &mut Vec<(PathBuf, u64, String)>,
    ) -> Result<(), ProbeError> {
        let lib_name = lib.display().to_string();
        for &(symbol, program, cookie, required) in table {
            let info = elf::lookup_symbol(lib, symbol).map_err(|source| ProbeError::Resolve {
                pid: self.pid,
                lib: lib_name.clone(),
                api: symbol.to_string(),
                source,
            })?;
            let Some(info) = info else {
                if required {
                    return Err(ProbeError::MissingSymbol {
                        lib: lib_name,
                        symbol: symbol.to_string(),
                        family,
                    });
                }
                continue;
            };
            if let Some((_, _, first)) = done
                .iter()
                .find(|(p, off, _)| p == lib && *off == info.file_offset)
            {
                let first = first.clone();
                self.note(
                    family,
                    symbol,
                    format!("same code as {first}: counted there"),
                );
                continue;
            }
            // An optional entry point (libstdc++'s operator new[], sized and
            // array deletes) that only jumps on gets the forwarder program:
            // the probe at the end of the jump chain counts the call once,
            // under this entry point's name.
            let forwards_to = (!required)
                .then(|| tail_jump(lib, info.file_offset))
                .flatten();
            let program = if forwards_to.is_some() {
                "rig_alloc_fwd"
            } else {
                program
            };
            let at = uprobe(
                ebpf,
                family,
                program,
                lib,
                info.file_offset,
                Some(cookie as u64),
                self.pid,
            )?;
            done.push((lib.to_path_buf(), info.file_offset, symbol.to_string()));
            let how = match forwards_to {
                Some(dest) => format!(", a forwarder (jumps to {dest}): counted once at the end of the jump under this name"),
                None => String::new(),
            };
            self.note(
                family,
                symbol,
                format!(
                    "uprobe at {}+{:#x}{how}{}",
                    basename(&lib_name),
                    info.file_offset,
                    moved(&at, info.file_offset)
                ),
            );
        }
        Ok(())
    }

    fn attach_copy(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Copy;
        let libc_maps_path = maps
            .find_object(|p| basename(p).starts_with("libc.so"))
            .ok_or(ProbeError::NoLibc {
                pid: self.pid,
                family,
            })?;
        let libc = maps.open_path(&libc_maps_path);
        for api in ["memcpy", "memmove", "memset"] {
            let r = elf::resolve_ifunc(self.pid, maps, &libc_maps_path, api).map_err(|source| {
                ProbeError::Resolve {
                    pid: self.pid,
                    lib: libc_maps_path.clone(),
                    api: api.to_string(),
                    source,
                }
            })?;
            if let Some(existing) = self
                .copy_impls
                .iter_mut()
                .find(|c| c.file_offset == r.file_offset)
            {
                existing.apis.push(api.to_string());
                continue;
            }
            self.copy_impls.push(CopyImpl {
                apis: vec![api.to_string()],
                lib: libc_maps_path.clone(),
                file_offset: r.file_offset,
                impl_name: r.impl_name.clone(),
                method: r.method.clone(),
            });
        }
        for (i, c) in self.copy_impls.clone().iter().enumerate() {
            let at = uprobe(
                ebpf,
                family,
                "rig_copy",
                &libc,
                c.file_offset,
                Some(i as u64),
                self.pid,
            )?;
            self.note(
                family,
                c.apis.join("/"),
                format!(
                    "uprobe at {} ({}+{:#x}), found by {}{}",
                    c.impl_name
                        .as_deref()
                        .unwrap_or("an unnamed implementation"),
                    basename(&c.lib),
                    c.file_offset,
                    c.method,
                    moved(&at, c.file_offset)
                ),
            );
        }
        Ok(())
    }

    fn attach_locks(&mut self, ebpf: &mut Ebpf, maps: &ProcMaps) -> Result<(), ProbeError> {
        let family = Family::Locks;
        let libc = libc_path(maps, self.pid, family)?;
        let lib_name = libc.display().to_string();
        let find = |symbol: &str| -> Result<u64, ProbeError> {
            elf::lookup_symbol(&libc, symbol)
                .map_err(|source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: lib_name.clone(),
                    api: symbol.to_string(),
                    source,
                })?
                .map(|s| s.file_offset)
                .ok_or_else(|| ProbeError::MissingSymbol {
                    lib: lib_name.clone(),
                    symbol: symbol.to_string(),
                    family,
                })
        };
        let lock = find("pthread_mutex_lock")?;
        let trylock = find("pthread_mutex_trylock")?;
        let unlock = find("pthread_mutex_unlock")?;
        let pid = self.pid;
        for (program, entry, what) in [
            ("rig_mutex_lock", lock, "pthread_mutex_lock"),
            ("rig_mutex_lock_ret", lock, "pthread_mutex_lock return"),
            ("rig_mutex_trylock", trylock, "pthread_mutex_trylock"),
            (
                "rig_mutex_lock_ret",
                trylock,
                "pthread_mutex_trylock return",
            ),
            ("rig_mutex_unlock", unlock, "pthread_mutex_unlock"),
        ] {
            let at = uprobe(ebpf, family, program, &libc, entry, None, pid)?;
            if !at.skipped.is_empty() {
                self.note(family, what, moved(&at, entry));
            }
        }
        raw_tp(ebpf, family, "rig_lock_sys_enter", "sys_enter")?;
        raw_tp(ebpf, family, "rig_lock_sys_exit", "sys_exit")?;
        self.note(
            family,
            "pthread_mutex_lock/trylock/unlock",
            format!(
                "uprobes (+uretprobes on lock/trylock) in {}",
                basename(&lib_name)
            ),
        );
        Ok(())
    }
}

fn load(family: Family) -> Result<Ebpf, ProbeError> {
    let bytes = match family {
        Family::Syscalls => rig_ebpf::SYSCALLS,
        Family::Alloc => rig_ebpf::ALLOC,
        Family::Copy => rig_ebpf::COPY,
        Family::Locks => rig_ebpf::LOCKS,
        Family::Faults => rig_ebpf::FAULTS,
        Family::Sched => rig_ebpf::SCHED,
    };
    EbpfLoader::new()
        .load(bytes)
        .map_err(|source| ProbeError::Load { family, source })
}

fn add_target(ebpf: &mut Ebpf, family: Family, tgid: u32) -> Result<(), ProbeError> {
    let m = ebpf.map_mut("targets").ok_or_else(|| ProbeError::Missing {
        family,
        what: "map",
        name: "targets".into(),
    })?;
    let mut targets: HashMap<_, u32, u8> =
        HashMap::try_from(m).map_err(|source| ProbeError::Map {
            family,
            map: "targets",
            source,
        })?;
    targets
        .insert(tgid, 1, 0)
        .map_err(|source| ProbeError::Map {
            family,
            map: "targets",
            source,
        })
}

fn program_err(
    family: Family,
    what: String,
) -> impl FnOnce(aya::programs::ProgramError) -> ProbeError {
    move |source| ProbeError::Program {
        family,
        what,
        source,
    }
}

fn missing_program(family: Family, name: &str) -> ProbeError {
    ProbeError::Missing {
        family,
        what: "program",
        name: name.to_string(),
    }
}

fn raw_tp(ebpf: &mut Ebpf, family: Family, program: &str, tp: &str) -> Result<(), ProbeError> {
    let p: &mut RawTracePoint = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    p.load()
        .map_err(program_err(family, format!("loading {program}")))?;
    p.attach(tp).map_err(program_err(
        family,
        format!("attaching {program} to raw tracepoint {tp}"),
    ))?;
    Ok(())
}

/// Attach a uprobe (or uretprobe: the program's section decides) at a
/// function entry, scoped to the target process. The probe goes on the first
/// instruction that is safe to single-step (`placement`); returns where.
fn uprobe(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    lib: &Path,
    file_offset: u64,
    cookie: Option<u64>,
    pid: u32,
) -> Result<Placement, ProbeError> {
    let placement = safe_probe_offset(lib, file_offset).map_err(|why| ProbeError::Unsafe {
        family,
        what: format!("{program} at {}+{file_offset:#x}", lib.display()),
        why,
    })?;
    let p: &mut UProbe = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if p.fd().is_err() {
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    let point = UProbeAttachPoint {
        location: UProbeAttachLocation::AbsoluteOffset(placement.file_offset),
        cookie,
    };
    let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).expect("pid checked nonzero"));
    p.attach(point, lib, scope).map_err(program_err(
        family,
        format!(
            "attaching {program} at {}+{:#x}",
            lib.display(),
            placement.file_offset
        ),
    ))?;
    Ok(placement)
}

/// Text for a note when a probe was moved off a vector instruction.
fn moved(p: &Placement, entry: u64) -> String {
    if p.skipped.is_empty() {
        String::new()
    } else {
        format!(
            "; placed at entry+{:#x}, after `{}` (single-stepping vector instructions corrupts the target)",
            p.file_offset - entry,
            p.skipped.join("; ")
        )
    }
}

fn attach_faults(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    let family = Family::Faults;
    let cpus = aya::util::online_cpus().map_err(|(_, e)| ProbeError::Cpus(e))?;
    for (program, event) in [
        ("rig_fault_minor", SoftwareEvent::PageFaultsMin),
        ("rig_fault_major", SoftwareEvent::PageFaultsMaj),
    ] {
        let p: &mut PerfEvent = ebpf
            .program_mut(program)
            .ok_or_else(|| missing_program(family, program))?
            .try_into()
            .map_err(program_err(family, format!("program {program}")))?;
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
        for &cpu in &cpus {
            p.attach(
                PerfEventConfig::Software(event),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(1),
                false,
            )
            .map_err(program_err(
                family,
                format!("attaching {program} on cpu {cpu}"),
            ))?;
        }
    }
    Ok(())
}

fn libc_path(maps: &ProcMaps, pid: u32, family: Family) -> Result<PathBuf, ProbeError> {
    maps.find_object(|p| basename(p).starts_with("libc.so"))
        .map(|p| maps.open_path(&p))
        .ok_or(ProbeError::NoLibc { pid, family })
}

pub(crate) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// If the function at `file_offset` starts with an unconditional jump
/// (after an optional endbr64), return where it goes, as text.
fn tail_jump(lib: &Path, file_offset: u64) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(lib).ok()?;
    let mut code = [0u8; 16];
    f.read_exact_at(&mut code, file_offset).ok()?;
    let mut i = 0;
    if code[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        i = 4; // endbr64
    }
    let at = file_offset + i as u64;
    match code[i] {
        0xe9 => {
            let rel = i32::from_le_bytes(code[i + 1..i + 5].try_into().ok()?);
            Some(format!("+{:#x}", (at as i64 + 5 + rel as i64) as u64))
        }
        0xeb => {
            let rel = code[i + 1] as i8;
            Some(format!("+{:#x}", (at as i64 + 2 + rel as i64) as u64))
        }
        // jmp *disp32(%rip): a tail call through the GOT (PLT-less call).
        0xff if code[i + 1] == 0x25 => Some("a GOT entry".to_string()),
        _ => None,
    }
}
