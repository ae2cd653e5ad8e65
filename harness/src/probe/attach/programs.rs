//! Loading BPF objects and attaching their programs: raw tracepoints,
//! uprobes at a safe placement, per-CPU software events.

use super::*;
use crate::probe::kernel::{kernel, Build};
use rig_ebpf::abi::CookieKey;

pub(super) fn load(
    family: Family,
    stack_mode: Stacks,
    sizes: crate::probe::unwind::Sizes,
    live_heap: bool,
) -> Result<Ebpf, ProbeError> {
    let object = match family {
        Family::Syscalls => &rig_ebpf::SYSCALLS,
        Family::Alloc => &rig_ebpf::ALLOC,
        Family::Copy => &rig_ebpf::COPY,
        Family::Locks => &rig_ebpf::LOCKS,
        Family::Faults => &rig_ebpf::FAULTS,
        Family::Sched => &rig_ebpf::SCHED,
        Family::Cpu => &rig_ebpf::CPU,
        Family::User => &rig_ebpf::USER,
    };
    let bytes = match kernel().build() {
        Build::Full => object.full,
        Build::Compat => object.compat,
    };
    stacks::load_object(family, bytes, stack_mode, sizes, live_heap)
}

/// Load `families` and aim each at `pid`: in a tree, following forks from
/// the kernel side; with stacks, forgetting a process's modules at exec.
pub(super) fn load_following(
    families: &[Family],
    scope: Scope,
    stack_mode: Stacks,
    sizes: crate::probe::unwind::Sizes,
    pid: u32,
    live_heap: bool,
) -> Result<Vec<(Family, Ebpf)>, ProbeError> {
    let mode = match scope {
        Scope::Process => TARGET_ONE,
        Scope::Tree => TARGET_TREE,
    };
    let loaded = crate::probe::preload::load_all(
        families,
        scope == Scope::Tree,
        stack_mode == Stacks::On,
        |family| load(family, stack_mode, sizes, live_heap),
    )?;
    let mut objects = Vec::new();
    for (family, mut ebpf) in loaded {
        if scope == Scope::Tree {
            raw_tp(&mut ebpf, family, "rig_follow_fork", "sched_process_fork")?;
        }
        if stack_mode == Stacks::On {
            raw_tp(&mut ebpf, family, "rig_forget_exec", "sched_process_exec")?;
        }
        set_target(&mut ebpf, family, pid, mode)?;
        objects.push((family, ebpf));
    }
    Ok(objects)
}

/// The tracepoint and perf-event programs of each family (its uprobes go
/// in per process, when the process joins).
pub(super) fn attach_tracepoints(objects: &mut [(Family, Ebpf)]) -> Result<(), ProbeError> {
    for (family, ebpf) in objects {
        match family {
            Family::Syscalls => {
                raw_tp(ebpf, *family, "rig_sys_enter", "sys_enter")?;
                raw_tp(ebpf, *family, "rig_sys_exit", "sys_exit")?;
            }
            Family::Faults => attach_faults(ebpf)?,
            Family::Sched => raw_tp(
                ebpf,
                *family,
                kernel().sched_switch_program(),
                "sched_switch",
            )?,
            Family::Cpu => attach_cpu(ebpf)?,
            Family::Locks => {
                raw_tp(ebpf, *family, "rig_lock_sys_enter", "sys_enter")?;
                raw_tp(ebpf, *family, "rig_lock_sys_exit", "sys_exit")?;
            }
            Family::Alloc | Family::Copy | Family::User => {}
        }
    }
    Ok(())
}

pub(super) fn set_target(
    ebpf: &mut Ebpf,
    family: Family,
    tgid: u32,
    mode: u8,
) -> Result<(), ProbeError> {
    let m = read::map_mut(ebpf, family, "targets")?;
    let mut targets: HashMap<_, u32, u8> =
        HashMap::try_from(m).map_err(read::map_err(family, "targets"))?;
    targets
        .insert(tgid, mode, 0)
        .map_err(read::map_err(family, "targets"))
}

pub(super) fn program_err(
    family: Family,
    what: String,
) -> impl FnOnce(aya::programs::ProgramError) -> ProbeError {
    move |source| ProbeError::Program {
        family,
        what,
        source,
    }
}

pub(super) fn missing_program(family: Family, name: &str) -> ProbeError {
    ProbeError::Missing {
        family,
        what: "program",
        name: name.to_string(),
    }
}

pub(super) fn raw_tp(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    tp: &str,
) -> Result<(), ProbeError> {
    let p: &mut RawTracePoint = loaded(ebpf, family, program)?;
    p.attach(tp).map_err(program_err(
        family,
        format!("attaching {program} to raw tracepoint {tp}"),
    ))?;
    Ok(())
}

/// Where `program` goes for the function at `file_offset` of `lib`, letting
/// it move past the jumps of the sibling entries at `siblings` whose calls
/// are wanted too (`placement::safe_probe_offset_joining`).
pub(super) fn placement(
    family: Family,
    program: &str,
    lib: &Path,
    file_offset: u64,
    siblings: &[u64],
) -> Result<Placement, ProbeError> {
    safe_probe_offset_joining(lib, file_offset, args_read(program), siblings).map_err(|why| {
        ProbeError::Unsafe {
            family,
            what: format!("{program} at {}+{file_offset:#x}", lib.display()),
            why,
        }
    })
}

/// Attach `program` at a placement already decided.
pub(super) fn uprobe_placed(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    lib: &Path,
    placement: Placement,
    cookie: Option<u64>,
    pid: u32,
) -> Result<Placement, ProbeError> {
    // A kernel without bpf_get_attach_cookie gets the cookie in the
    // object's attach_cookies map instead, under the address the probe
    // fires at (the compat build looks it up there).
    let cookie = match cookie {
        Some(c) if kernel().cookies_by_address() => {
            insert_cookie(ebpf, family, pid, lib, placement.file_offset, c)?;
            None
        }
        c => c,
    };
    let p = loaded_uprobe(ebpf, family, program)?;
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

/// Uprobe program `program` of `family`'s object, loaded into the kernel.
pub(super) fn loaded_uprobe<'e>(
    ebpf: &'e mut Ebpf,
    family: Family,
    program: &str,
) -> Result<&'e mut UProbe, ProbeError> {
    loaded(ebpf, family, program)
}

/// Program `program` of `family`'s object as its kind `P`, loaded into the
/// kernel once (a program several probes share is loaded by the first).
fn loaded<'e, P>(ebpf: &'e mut Ebpf, family: Family, program: &str) -> Result<&'e mut P, ProbeError>
where
    &'e mut P: TryFrom<&'e mut aya::programs::Program, Error = aya::programs::ProgramError>,
    P: Loads + 'e,
{
    let p: &mut P = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if !p.is_loaded() {
        p.load_it()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    Ok(p)
}

/// The two program kinds rig attaches by hand: aya gives each its own
/// `load`, with no trait over them.
trait Loads {
    fn is_loaded(&self) -> bool;
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError>;
}

impl Loads for UProbe {
    fn is_loaded(&self) -> bool {
        self.fd().is_ok()
    }
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

impl Loads for RawTracePoint {
    fn is_loaded(&self) -> bool {
        self.fd().is_ok()
    }
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

/// Write `cookie` under every address at which `pid` maps `file_offset` of
/// `lib` (the file is matched by inode: `lib` may be any path to the mapped
/// file, /proc/PID/map_files or /proc/PID/root, whose device numbers need not
/// be the ones the maps file prints).
pub(super) fn insert_cookie(
    ebpf: &mut Ebpf,
    family: Family,
    pid: u32,
    lib: &Path,
    file_offset: u64,
    cookie: u64,
) -> Result<(), ProbeError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(lib).map_err(|source| ProbeError::Cookie {
        family,
        why: format!("stat {}: {source}", lib.display()),
    })?;
    let maps = ProcMaps::read(pid).map_err(|source| ProbeError::Maps { pid, source })?;
    let addrs: Vec<u64> = maps
        .mappings
        .iter()
        .filter(|m| m.inode == meta.ino() && m.is_exec())
        .filter(|m| file_offset >= m.offset && file_offset < m.offset + (m.end - m.start))
        .map(|m| m.start + (file_offset - m.offset))
        .collect();
    if addrs.is_empty() {
        return Err(ProbeError::Cookie {
            family,
            why: format!(
                "{}+{file_offset:#x} (inode {}) is in no executable mapping of pid {pid}",
                lib.display(),
                meta.ino()
            ),
        });
    }
    let m = read::map_mut(ebpf, family, "attach_cookies")?;
    let mut map: HashMap<_, CookieKey, u64> =
        HashMap::try_from(m).map_err(read::map_err(family, "attach_cookies"))?;
    for addr in addrs {
        let key = CookieKey {
            tgid: pid,
            pad: 0,
            addr,
        };
        map.insert(key, cookie, 0)
            .map_err(read::map_err(family, "attach_cookies"))?;
    }
    Ok(())
}

/// How many argument registers (`PT_REGS_PARM1`.. in ebpf/bpf/*.bpf.c) a
/// uprobe program reads when hit; the probe may move past instructions that
/// write the others. Every program also reads `rsp` (the return address at
/// `*rsp`, the forwarder and allocator frame matching), the pc and `rbp`
/// (the stack unwinder), which no placement lets change. An unknown program
/// is taken to read all six.
pub(super) fn args_read(program: &str) -> usize {
    match program {
        // A forwarder's entry and a lock call's return read no argument.
        "rig_alloc_fwd" | "rig_mutex_lock_ret" | "rig_alloc_ret" | "rig_alloc_go_gc" => 0,
        "rig_alloc_unsized" => 0,
        // A user probe reads no argument register at a function's entry.
        "rig_user_func" | "rig_user_go" | "rig_user_usdt" => 0,
        "rig_alloc_arg1" | "rig_alloc_free" => 1,
        "rig_mutex_lock" | "rig_mutex_trylock" | "rig_mutex_unlock" => 1,
        "rig_alloc_calloc" | "rig_alloc_arg2" => 2,
        "rig_alloc_arg3" | "rig_copy" => 3,
        "rig_alloc_arg4" => 4,
        "rig_alloc_arg5" => 5,
        _ => 6,
    }
}

/// Text for a note when a probe was moved off the entry.
pub(super) fn moved(p: &Placement, entry: u64) -> String {
    match p.why {
        Why::Entry => String::new(),
        Why::PastVectors => format!(
            "; placed at entry+{:#x}, after `{}` (single-stepping vector instructions corrupts the target)",
            p.file_offset - entry,
            p.skipped.join("; ")
        ),
        Why::Emulated => format!(
            "; placed at entry+{:#x} on `{}`, after `{}` (the kernel emulates it, not the instructions before it){}",
            p.file_offset - entry,
            p.instruction,
            p.skipped.join("; "),
            p.joined
                .iter()
                .map(|j| format!(
                    "; the entry at {j:#x} jumps into the skipped instructions and its calls are counted here"
                ))
                .collect::<String>()
        ),
    }
}

pub(super) fn attach_faults(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    for (program, event) in [
        ("rig_fault_minor", SoftwareEvent::PageFaultsMin),
        ("rig_fault_major", SoftwareEvent::PageFaultsMaj),
    ] {
        per_cpu_event(ebpf, Family::Faults, program, event, 1)?;
    }
    Ok(())
}

/// Load `program` and attach it to the software perf event `event` on
/// every online CPU (all processes: the program filters by tgid), firing
/// every `period` events.
pub(super) fn per_cpu_event(
    ebpf: &mut Ebpf,
    family: Family,
    program: &str,
    event: SoftwareEvent,
    period: u64,
) -> Result<(), ProbeError> {
    let cpus = aya::util::online_cpus().map_err(|(_, e)| ProbeError::Cpus(e))?;
    let p: &mut PerfEvent = ebpf
        .program_mut(program)
        .ok_or_else(|| missing_program(family, program))?
        .try_into()
        .map_err(program_err(family, format!("program {program}")))?;
    if p.fd().is_err() {
        p.load()
            .map_err(program_err(family, format!("loading {program}")))?;
    }
    for &cpu in &cpus {
        p.attach(
            PerfEventConfig::Software(event),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period),
            false,
        )
        .map_err(program_err(
            family,
            format!("attaching {program} on cpu {cpu}"),
        ))?;
    }
    Ok(())
}

/// A software cpu-clock event on every CPU, sampling every
/// `CPU_SAMPLE_PERIOD_NS` of CPU time; the program keeps the followed
/// processes' samples.
pub(super) fn attach_cpu(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    per_cpu_event(
        ebpf,
        Family::Cpu,
        "rig_cpu_sample",
        SoftwareEvent::CpuClock,
        CPU_SAMPLE_PERIOD_NS,
    )
}

/// The process's C library as the alloc, copy and locks families probe it:
/// its libc.so, or the executable that carries it linked in
/// (`runtime::c_library`).
pub(super) struct CLibrary {
    /// Its path as `/proc/PID/maps` names it.
    pub maps_path: String,
    /// A path rig can open it by.
    pub open: PathBuf,
    /// What its runtime says it exports for copies and mutexes.
    pub copies: Option<&'static crate::runtime::CopyApi>,
    pub locks: Option<&'static crate::runtime::LockApi>,
    /// Linked into the executable, which keeps only the functions the
    /// program calls: one it lacks can never be called, and is absent,
    /// not an error.
    pub statically: bool,
    pub facts: std::sync::Arc<crate::elf::ElfFacts>,
}

/// The one C library of process `pid` (`runtime::c_library`'s rule) and
/// its runtime's answers; `NoLibc` for a process without one.
pub(super) fn c_library(maps: &ProcMaps, pid: u32, family: Family) -> Result<CLibrary, ProbeError> {
    let (maps_path, kind) =
        crate::runtime::c_library(pid, maps).ok_or(ProbeError::NoLibc { pid, family })?;
    let open = maps.readable_path(&maps_path);
    let facts = crate::elf::ElfFacts::shared(&open).unwrap_or_default();
    let m = crate::runtime::Module {
        kind,
        facts: &facts,
    };
    Ok(CLibrary {
        copies: crate::runtime::copy_api(&m),
        locks: crate::runtime::lock_api(&m),
        statically: matches!(kind, crate::runtime::ModuleKind::StaticC { .. }),
        maps_path,
        open,
        facts,
    })
}

pub(crate) fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// If the function at `file_offset` starts with an unconditional jump
/// (after an optional endbr64), return where it goes, as text.
pub(super) fn tail_jump(lib: &Path, file_offset: u64) -> Option<String> {
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
