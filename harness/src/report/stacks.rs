//! Whole stacks of a window: every counted event's user stack (and kernel
//! stack where the family takes one), with exact counts per stack, and the
//! *user site* of each: the first frame outside allocators, C/C++/Rust
//! standard-library wrappers and any pattern the user adds.
//!
//! In: a `probe::Window` whose families ran with stacks on, the session's
//! `Symbolizer`, the wrapper patterns. Out: a `StackSection` (serializable;
//! stacks are stored once, keyed by id, and rows refer to them).

use std::collections::BTreeMap;

use rig_ebpf::abi::{
    stack_flag, stack_what, AllocStackArg, StackKey, UStack, ALLOC_CLASS_NULL_FREE,
    ALLOC_CLASS_UNSIZED,
};
use serde::Serialize;

use crate::probe::{syscall_name, AllocEntry, CopyImpl, Family, Window};
use crate::process::maps::basename;
use crate::runtime;
use crate::symbolize::{AddrKind, Naming, Site, Symbolizer};

/// Whether `f` is a C allocator or copy entry point, matched exactly (a
/// prefix would catch `freeaddrinfo`): the C API's names, glibc's `cfree`,
/// the copy APIs.
fn is_c_api_name(f: &str) -> bool {
    crate::runtime::alloc::C_NAMES.contains(&f)
        || f == "cfree"
        || crate::runtime::copy_names().contains(&f)
}

/// Pseudo modules whose every frame is a wrapper: the kernel's vDSO
/// (clock_gettime's code, between its caller and the system call it falls
/// back to).
const WRAPPER_MODULES: &[&str] = &["[vdso]"];

/// Which frames are wrappers: by the runtimes' wrapper prefixes and
/// modules (`runtime::wrapper_prefixes`: allocator entry points and
/// internals, and standard-library code between the code a user can change
/// and the counted event), the C API's names, and `--wrapper`'s.
#[derive(Clone, Debug)]
pub struct Wrappers {
    /// Function-name prefixes; a pattern ending in `*` is the same prefix,
    /// one starting with `*` matches anywhere in the name.
    pub patterns: Vec<String>,
}

impl Default for Wrappers {
    fn default() -> Self {
        Wrappers {
            patterns: runtime::wrapper_prefixes().map(str::to_string).collect(),
        }
    }
}

impl Wrappers {
    /// The defaults plus `extra` (from `--wrapper` or a target spec).
    pub fn with_extra(extra: &[String]) -> Wrappers {
        let mut w = Wrappers::default();
        w.patterns.extend(extra.iter().cloned());
        w
    }

    pub fn is_wrapper(&self, site: &Site) -> bool {
        if let Some(m) = site.module.as_deref() {
            let b = basename(m);
            if WRAPPER_MODULES
                .iter()
                .copied()
                .chain(runtime::wrapper_modules())
                .any(|w| b.starts_with(w))
            {
                return true;
            }
        }
        let Some(f) = site.function.as_deref() else {
            return false;
        };
        if is_c_api_name(f) {
            return true;
        }
        let bare = f
            .trim_start_matches('<')
            .trim_start_matches('&')
            .trim_start_matches("mut ")
            .trim_start_matches("dyn ");
        // `<T as core::iter::IntoIterator>::into_iter`: a generic type
        // parameter implementing a standard trait is the standard library's
        // code (a named type implementing one, `<MyType as Display>::fmt`,
        // is the user's).
        let via_trait = bare
            .split_once(" as ")
            .and_then(|(ty, tr)| (!ty.contains("::") && ty.len() <= 2).then_some(tr));
        self.patterns
            .iter()
            .any(|p| matches(p, f) || matches(p, bare) || via_trait.is_some_and(|t| matches(p, t)))
    }
}

fn matches(pattern: &str, f: &str) -> bool {
    if let Some(inner) = pattern.strip_prefix('*') {
        let inner = inner.strip_suffix('*').unwrap_or(inner);
        return f.contains(inner);
    }
    let p = pattern.strip_suffix('*').unwrap_or(pattern);
    f.starts_with(p)
}

/// One user stack, innermost frame first.
#[derive(Clone, Debug, Serialize)]
pub struct StackFrames {
    pub frames: Vec<Site>,
    /// Index in `frames` of the user site.
    pub user_site: usize,
    /// Why the walk stopped before the outermost frame, if it did:
    /// `truncated` (deeper than 64 frames), `no unwind table`, `no row`,
    /// `unsupported rule`, `unreadable stack`, `process without tables`.
    pub incomplete: Vec<String>,
}

/// Exact count (and bytes or ns) of one event at one stack.
#[derive(Clone, Debug, Serialize)]
pub struct StackRow {
    pub family: Family,
    /// What was counted: `malloc`, `getppid`, `memcpy/memmove`, `lock`,
    /// `futex wait`, `minor fault`, `off-CPU voluntary`, ...
    pub event: String,
    /// Size class for allocations (sizes in (2^(c-1), 2^c]).
    pub size_class: Option<u32>,
    pub pid: u32,
    pub count: u64,
    /// Bytes (alloc, copy) or nanoseconds (futex wait, off-CPU); 0 otherwise.
    pub amount: u64,
    /// Key into `StackSection::stacks`; `None` when no user stack was taken.
    pub stack: Option<String>,
    /// Key into `StackSection::kernel`.
    pub kernel_stack: Option<String>,
    /// A malloc/free made by another allocator call on the caller's behalf
    /// (inside operator new/delete or the C library's allocator): the
    /// outer call has its own row, so this one must not be added to it
    /// (as in the per-site table, see `report::is_inner_alloc`).
    pub inner: bool,
    /// The event happened inside rig's own probe handling, not the
    /// server's code: its user pc in the kernel's execute-out-of-line page
    /// (`[uprobes]`, where a probed instruction is single-stepped) or its
    /// kernel stack in the uprobe handlers. Rig's cost, shown as one row
    /// apart ("rig's probes"), never as a user site.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rig_probes: bool,
    /// An application allocator's call (its pools, `--alloc-func`): a
    /// layer beside the heap's, never in the heap's totals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub beside_the_heap: bool,
    /// A free, of any allocator.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub free: bool,
}

/// The pseudo path of the page the kernel single-steps probed instructions
/// in (its uprobe execute-out-of-line area) and returns through from a
/// uretprobe.
pub const UPROBES_PAGE: &str = "[uprobes]";

/// Kernel functions that run only for a uprobe hit: a sample or switch
/// with one of them on its kernel stack is rig's probe handling.
const UPROBE_HANDLERS: &[&str] = &[
    "uprobe_notify_resume",
    "handle_swbp",
    "handle_singlestep",
    "uprobe_dispatcher",
    "uretprobe_dispatcher",
    "uprobe_handle_trampoline",
    "arch_uprobe_",
    "uprobe_perf_func",
    "__uprobe_perf_func",
    "uprobe_pre_sstep_notifier",
    "uprobe_post_sstep_notifier",
    "bpf_prog_",
];

/// Whether an event with this user stack and kernel stack happened in
/// rig's own probe handling (`StackRow::rig_probes`).
pub fn in_rig_probes(user: Option<&StackFrames>, kernel: Option<&[String]>) -> bool {
    let first_user = user.and_then(|s| s.frames.first());
    first_user.is_some_and(|f| f.module.as_deref() == Some(UPROBES_PAGE))
        || kernel.is_some_and(|k| {
            k.iter()
                .any(|name| UPROBE_HANDLERS.iter().any(|h| name.starts_with(h)))
        })
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct StackSection {
    /// Whether stacks were taken at all in this window.
    pub enabled: bool,
    /// User stacks by id (hex of the in-kernel hash).
    pub stacks: BTreeMap<String, StackFrames>,
    /// Kernel stacks by `family:id`, named from kallsyms.
    pub kernel: BTreeMap<String, Vec<String>>,
    /// Rows, largest count first within each family.
    pub rows: Vec<StackRow>,
    /// Events whose stack is incomplete, by family (see `StackFrames`).
    pub incomplete_events: BTreeMap<Family, u64>,
    /// Stacks (user or kernel) that could not be taken or stored, by
    /// family: the events are counted, their stacks are missing.
    pub stack_failures: BTreeMap<Family, u64>,
    /// Processes past a limit of rig's unwind tables (more executable
    /// mappings, or more address spaces, than the tables hold): their
    /// stacks end early. Empty when every process fit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
}

impl StackSection {
    pub fn build(
        w: &Window,
        copy_impls: &[CopyImpl],
        sym: &mut Symbolizer,
        wrappers: &Wrappers,
    ) -> StackSection {
        let mut out = StackSection {
            enabled: !w.delta.stacks.is_empty(),
            stack_failures: w
                .delta
                .stats
                .iter()
                .map(|(f, s)| (*f, s.slot[rig_ebpf::abi::stat::STACK_MISSING]))
                .filter(|(_, n)| *n > 0)
                .collect(),
            limits: w.stack_limits.clone(),
            ..Default::default()
        };
        out.name_user_stacks(w, sym, wrappers);
        let mut kernel_names = KernelNames::new();
        for (family, st) in &w.delta.stacks {
            for (k, v) in &st.counts {
                let stack = (k.ustack != 0).then(|| format!("{:016x}", k.ustack));
                let user = stack.as_ref().and_then(|s| out.stacks.get(s));
                if user.is_none_or(|s| !s.incomplete.is_empty()) {
                    *out.incomplete_events.entry(*family).or_default() += v.count;
                }
                let kernel_stack = (k.kstack >= 0).then(|| format!("{family}:{}", k.kstack));
                if let Some(ks) = &kernel_stack {
                    if !out.kernel.contains_key(ks) {
                        let frames = st.kstacks.get(&k.kstack).cloned().unwrap_or_default();
                        out.kernel.insert(ks.clone(), kernel_names.name(&frames));
                    }
                }
                let (event, size_class) =
                    event_name(k.what, k.arg, copy_impls, &w.alloc_entries, &w.user_sites);
                let inner = made_inside_another_alloc(k, user);
                let (beside_the_heap, free) = alloc_role(k);
                // The families that watch the process from outside its code
                // (samples, switches, faults) can land in rig's handling;
                // the uprobe families' own events are taken in it.
                let watched = matches!(family, Family::Cpu | Family::Sched | Family::Faults);
                let rig_probes = watched
                    && in_rig_probes(
                        user,
                        kernel_stack
                            .as_ref()
                            .and_then(|ks| out.kernel.get(ks))
                            .map(Vec::as_slice),
                    );
                out.rows.push(StackRow {
                    family: *family,
                    event,
                    size_class,
                    pid: k.tgid,
                    count: v.count,
                    amount: v.amount,
                    stack,
                    kernel_stack,
                    inner,
                    rig_probes,
                    beside_the_heap,
                    free,
                });
            }
        }
        out.rows.sort_by(|a, b| {
            a.family
                .cmp(&b.family)
                .then(b.count.cmp(&a.count))
                .then(b.amount.cmp(&a.amount))
        });
        out
    }

    /// Name every user stack the window counted, each once, symbolized
    /// with the memory map of the process that took it.
    fn name_user_stacks(&mut self, w: &Window, sym: &mut Symbolizer, wrappers: &Wrappers) {
        // (tgid, stack id) -> stack, for naming with the right map.
        let mut wanted: BTreeMap<(u32, u64), UStack> = BTreeMap::new();
        for st in w.delta.stacks.values() {
            for k in st.counts.keys() {
                if let Some(s) = st.ustacks.get(&k.ustack) {
                    wanted.insert((k.tgid, k.ustack), *s);
                }
            }
        }
        for ((tgid, id), s) in &wanted {
            let key = format!("{id:016x}");
            if self.stacks.contains_key(&key) {
                continue;
            }
            self.stacks
                .insert(key, name_stack(w, *tgid, s, sym, wrappers));
        }
    }

    /// The user-site label of a row (or `?` without a stack).
    pub fn user_site(&self, row: &StackRow) -> Option<&Site> {
        let s = self.stacks.get(row.stack.as_ref()?)?;
        s.frames.get(s.user_site)
    }
}

/// An allocator call made inside another allocator call: the probe marked
/// it so; failing that, the innermost frame of its `user` stack is the
/// allocator's entry and its caller says whether another allocator call
/// made it.
/// Whether an event is an application allocator's call, and a free.
fn alloc_role(k: &StackKey) -> (bool, bool) {
    if k.what != stack_what::ALLOC {
        return (false, false);
    }
    let kind = AllocStackArg::decode(k.arg).kind();
    (super::is_application(kind), super::is_free(kind))
}

fn made_inside_another_alloc(k: &StackKey, user: Option<&StackFrames>) -> bool {
    k.what == stack_what::ALLOC
        && (AllocStackArg::decode(k.arg).inner
            || user.and_then(|s| s.frames.get(1)).is_some_and(|caller| {
                super::is_inner_alloc(AllocStackArg::decode(k.arg).kind(), caller)
            }))
}

fn name_stack(
    w: &Window,
    tgid: u32,
    s: &UStack,
    sym: &mut Symbolizer,
    wrappers: &Wrappers,
) -> StackFrames {
    let maps = w.maps_of(tgid);
    let ips = s.frames();
    let mut frames = Vec::with_capacity(ips.len());
    if let Some((first, rest)) = ips.split_first() {
        frames.extend(sym.symbolize(maps, &[*first], AddrKind::InstructionPointer));
        frames.extend(sym.symbolize(maps, rest, AddrKind::ReturnAddress));
    }
    let spliced = super::interp::splice(w, tgid, s, &mut frames);
    let native = frames.iter().enumerate().position(|(i, f)| {
        f.naming != Naming::Interpreted && !wrappers.is_wrapper(f) && !in_c_library(maps, f, i > 0)
    });
    let user_site = spliced.user_site(&frames, native);
    let mut incomplete = spliced.why;
    if s.flags & stack_flag::TRUNCATED != 0 {
        incomplete.push("truncated".to_string());
    }
    for (bit, no_row) in [(stack_flag::NO_TABLE, false), (stack_flag::NO_ROW, true)] {
        if s.flags & bit != 0 {
            let last = frames.last().map(|f| f.addr);
            incomplete.push(runtime::stack_end_reason(maps, last, no_row));
        }
    }
    for (bit, what) in [
        (stack_flag::BAD_RULE, "unsupported rule"),
        (stack_flag::READ_FAIL, "unreadable stack"),
        (stack_flag::NO_PROC, "process without tables"),
        (stack_flag::NO_REGS, "no user registers"),
        (
            stack_flag::LOST_RETURN,
            "return address held by a uretprobe",
        ),
    ] {
        if s.flags & bit != 0 {
            incomplete.push(what.to_string());
        }
    }
    StackFrames {
        frames,
        user_site,
        incomplete,
    }
}

/// Whether frame `f` (a return address when `returned`) is the C
/// library's code by its runtime's rule (`runtime::is_wrapper_frame`: in a
/// static executable, code the module-name list cannot tell apart).
fn in_c_library(maps: &crate::process::maps::ProcMaps, f: &Site, returned: bool) -> bool {
    f.module.as_deref().is_some_and(|m| {
        runtime::is_wrapper_frame(maps, m, f.module_offset, f.function.as_deref(), returned)
    })
}

/// The event a (what, arg) pair counts, and its size class for allocations.
/// For allocations, `arg` is `inner << 31 | entry << 16 | kind << 8 |
/// size class` (alloc.bpf.c), named through `alloc_entries`.
pub fn event_name(
    what: u32,
    arg: u32,
    copy_impls: &[CopyImpl],
    alloc_entries: &[AllocEntry],
    user_sites: &[crate::probe::user::UserSite],
) -> (String, Option<u32>) {
    match what {
        stack_what::ALLOC => {
            let a = AllocStackArg::decode(arg);
            let (cookie, class) = (a.cookie, a.class);
            let null = class == (ALLOC_CLASS_NULL_FREE & 0xff);
            let name = super::alloc_call(cookie, alloc_entries).1;
            // An allocation no argument sizes: its bytes are unknown, and
            // its name says so beside the 0 its bytes column holds.
            if class == (ALLOC_CLASS_UNSIZED & 0xff) {
                return (format!("{name} (unsized)"), None);
            }
            (name, (!null).then_some(class))
        }
        stack_what::COPY => (
            copy_impls
                .get(arg as usize)
                .map(|c| c.apis.join("/"))
                .unwrap_or_else(|| format!("copy #{arg}")),
            None,
        ),
        stack_what::LOCK => (super::lock_op_name(arg).to_string(), None),
        stack_what::FUTEX_WAIT => (super::lock_wait_name(arg).to_string(), None),
        stack_what::SYSCALL => (syscall_name(arg), None),
        stack_what::FAULT => (
            if arg == rig_ebpf::abi::FAULT_MAJOR {
                "major fault"
            } else {
                "minor fault"
            }
            .to_string(),
            None,
        ),
        stack_what::OFFCPU => (
            if arg == 1 {
                "off-CPU voluntary"
            } else {
                "off-CPU involuntary"
            }
            .to_string(),
            None,
        ),
        stack_what::CPU => ("on-CPU sample".to_string(), None),
        stack_what::USER => (
            user_sites
                .get(arg as usize)
                .map(|s| s.probe.clone())
                .unwrap_or_else(|| format!("user probe #{arg}")),
            None,
        ),
        other => (format!("event {other}"), None),
    }
}

/// Kernel addresses named from /proc/kallsyms (blazesym), once each.
struct KernelNames {
    symbolizer: blazesym::symbolize::Symbolizer,
    cache: BTreeMap<u64, String>,
}

impl KernelNames {
    fn new() -> Self {
        KernelNames {
            symbolizer: blazesym::symbolize::Symbolizer::new(),
            cache: BTreeMap::new(),
        }
    }

    fn name(&mut self, addrs: &[u64]) -> Vec<String> {
        use blazesym::symbolize::{source, Input, Symbolized};
        let todo: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.cache.contains_key(a))
            .collect();
        if !todo.is_empty() {
            let src = source::Source::Kernel(source::Kernel {
                vmlinux: blazesym::MaybeDefault::None,
                ..Default::default()
            });
            let named = self
                .symbolizer
                .symbolize(&src, Input::AbsAddr(&todo))
                .unwrap_or_default();
            for (i, a) in todo.iter().enumerate() {
                let n = match named.get(i) {
                    Some(Symbolized::Sym(s)) => format!("{}+{:#x}", s.name, s.offset),
                    _ => format!("{a:#x} [kernel]"),
                };
                self.cache.insert(*a, n);
            }
        }
        addrs.iter().map(|a| self.cache[a].clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::Naming;

    fn site(module: &str, f: &str) -> Site {
        Site {
            addr: 0,
            module: Some(module.to_string()),
            module_offset: 0,
            build_id: None,
            function: Some(f.to_string()),
            function_offset: 0,
            file: None,
            line: None,
            inlined: Vec::new(),
            naming: Naming::Symbol,
        }
    }

    #[test]
    fn wrappers_cover_allocators_and_std_but_not_user_code() {
        let w = Wrappers::default();
        assert!(w.is_wrapper(&site("/usr/lib/x86_64-linux-gnu/libc.so.6", "_int_malloc")));
        assert!(w.is_wrapper(&site("/srv/app", "alloc::raw_vec::RawVec<T,A>::grow_one")));
        assert!(w.is_wrapper(&site(
            "/srv/app",
            "<alloc::vec::Vec<T> as core::clone::Clone>::clone"
        )));
        assert!(w.is_wrapper(&site("/srv/app", "__rust_alloc")));
        assert!(w.is_wrapper(&site("/srv/app", "__rustc::__rdl_alloc")));
        assert!(w.is_wrapper(&site(
            "/srv/app",
            "<&std::net::tcp::TcpStream as std::io::Read>::read"
        )));
        assert!(w.is_wrapper(&site("/srv/app", "malloc")));
        assert!(!w.is_wrapper(&site("/srv/app", "freeaddrinfo_wrapper")));
        assert!(w.is_wrapper(&site(
            "/srv/app",
            "<T as alloc::slice::<impl [T]>::to_vec_in::ConvertVec>::to_vec"
        )));
        assert!(!w.is_wrapper(&site("/srv/app", "<app::Body as core::fmt::Display>::fmt")));
        assert!(!w.is_wrapper(&site("/srv/app", "hyper::proto::h1::role::encode_headers")));
        assert!(!w.is_wrapper(&site("/usr/sbin/nginx", "ngx_alloc")));
        let w = Wrappers::with_extra(&["ngx_alloc".into(), "ngx_p*".into(), "*pool*".into()]);
        assert!(w.is_wrapper(&site("/usr/sbin/nginx", "ngx_alloc")));
        assert!(w.is_wrapper(&site("/usr/sbin/nginx", "ngx_palloc")));
        assert!(w.is_wrapper(&site("/usr/sbin/nginx", "ngx_create_pool")));
        assert!(!w.is_wrapper(&site("/usr/sbin/nginx", "ngx_http_process_request")));
    }
}
