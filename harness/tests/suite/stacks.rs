//! Whole call stacks on fixtures built WITHOUT frame pointers, in C, C++
//! and Rust (fixtures/stacks, truth in `rig_fixtures::stacks` and
//! fixtures/stacks/COSTS.md): for a fixed-count window every stack and its
//! exact count equal the truth by construction, the user site is the first
//! fixture frame, and the stacks equal gdb's backtraces at the same
//! breakpoints in the same process.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rig::probe::{Family, ProbeSet, WindowEnd};
use rig::report::stacks::{StackFrames, StackRow};
use rig::report::Attribution;
use rig::symbolize::{Site, Symbolizer};
use rig_fixtures::stacks::{Between, Chain, Lang, RS_MUSL_RUNTIME};

use super::{probes_shared, root_or_skip};

/// A stack fixture, started for one test: one request per line on stdin,
/// one `ok` line back. Killed and reaped on drop.
pub(super) struct Fixture {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Fixture {
    pub(super) fn start(path: &Path) -> Fixture {
        Fixture::start_with(path, &[] as &[&str])
    }

    /// [`Fixture::start`] with arguments.
    pub(super) fn start_with<A: AsRef<std::ffi::OsStr>>(path: &Path, args: &[A]) -> Fixture {
        let mut child = Command::new(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", path.display()));
        let input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "READY\n", "{}", path.display());
        Fixture {
            child,
            input,
            output,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self) {
        self.input.write_all(b"go\n").unwrap();
    }

    fn answer(&mut self) {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert_eq!(line, "ok\n");
    }

    /// Wait until the fixture has entered its next read(2) of stdin: a
    /// window's edges then fall between requests for every event, the read
    /// included (an answer arrives before the fixture calls read again).
    fn wait_in_read(&self) {
        let path = format!("/proc/{}/syscall", self.pid());
        for _ in 0..10_000 {
            let s = std::fs::read_to_string(&path).unwrap_or_default();
            // "0 0x0 ..." : blocked in syscall 0 (read) on fd 0.
            if s.starts_with("0 0x0 ") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("the fixture never blocked in read(0): {path}");
    }

    fn serve(&mut self, n: u64) {
        for _ in 0..n {
            self.send();
            self.answer();
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A window of exactly `n` requests with `families` probed, stacks on.
pub(super) fn measure(fx: &mut Fixture, families: &[Family], n: u64) -> Attribution {
    fx.serve(50); // warm-up: first-touch faults, malloc's tcache
    let probes = ProbeSet::attach(fx.pid(), families).expect("probes attach");
    fx.serve(50);
    fx.wait_in_read();
    let start = probes.start_window().unwrap();
    fx.serve(n);
    fx.wait_in_read();
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    drop(probes);
    let a = Attribution::build(&w, Some(n), None, &mut Symbolizer::new());
    assert!(a.complete, "no events lost: {:?}", a.losses);
    a
}

/// The family that counts `event` (an API name as in `rig_fixtures::stacks`).
fn family_of(event: &str) -> Family {
    match event {
        "malloc" | "free" | "operator new" | "operator delete" | "__rust_alloc"
        | "__rust_dealloc" => Family::Alloc,
        "memcpy" => Family::Copy,
        "lock" | "unlock" => Family::Locks,
        _ => Family::Syscalls,
    }
}

fn event_matches(chain: &Chain, row: &StackRow) -> bool {
    row.event == chain.event || row.event.split('/').any(|e| e == chain.event)
}

/// A function name without C++ parameters or the Rust crate path, as the
/// fixture tables write it.
pub(super) fn base_name(f: &str) -> &str {
    let f = f.split('(').next().unwrap_or(f);
    f.strip_prefix("stackcalib_rs::").unwrap_or(f)
}

fn is_rust_std(f: &str) -> bool {
    [
        "std::", "<std::", "core::", "<core::", "alloc::", "<alloc::",
    ]
    .iter()
    .any(|p| f.starts_with(p))
}

fn name(site: &Site) -> &str {
    site.function.as_deref().unwrap_or("?")
}

fn render(s: &StackFrames) -> String {
    let mut out = String::new();
    for (i, f) in s.frames.iter().enumerate() {
        let mark = if i == s.user_site { '*' } else { ' ' };
        out.push_str(&format!("  {mark}{i:>2} {:#x} {}\n", f.addr, f.label()));
    }
    if !s.incomplete.is_empty() {
        out.push_str(&format!("  incomplete: {:?}\n", s.incomplete));
    }
    out
}

/// Whether `s` is exactly `chain`'s stack; if not, why.
fn check_stack(lang: Lang, chain: &Chain, s: &StackFrames, binary: &str) -> Result<(), String> {
    if !s.incomplete.is_empty() {
        return Err(format!("incomplete: {:?}", s.incomplete));
    }
    let f = &s.frames;
    let leaf = f.first().ok_or("no frames")?;
    if !name(leaf).starts_with(chain.leaf) {
        return Err(format!("leaf {} is not {}", name(leaf), chain.leaf));
    }
    let mut i = 1;
    match chain.between {
        Between::Exactly(names) => {
            for n in names {
                match f.get(i) {
                    Some(fr) if name(fr).starts_with(n) => i += 1,
                    other => {
                        return Err(format!("frame {i}: {:?} is not {n}", other.map(name)));
                    }
                }
            }
        }
        Between::RustStd => {
            while f.get(i).is_some_and(|fr| is_rust_std(name(fr))) {
                i += 1;
            }
        }
    }
    if s.user_site != i {
        return Err(format!("user site is frame {}, not {i}", s.user_site));
    }
    for (function, marker) in chain.frames {
        let fr = f.get(i).ok_or(format!("frame {i} missing"))?;
        let want_at = lang.at(marker);
        if base_name(name(fr)) != *function
            || fr.file_line().as_deref() != Some(want_at.as_str())
            || fr.module.as_deref() != Some(binary)
        {
            return Err(format!(
                "frame {i}: {} is not {function} ({want_at}) in the fixture",
                fr.label()
            ));
        }
        i += 1;
    }
    let rest: Vec<&str> = f[i..].iter().map(name).collect();
    let runtime = lang.runtime();
    if rest.len() != runtime.len() || rest.iter().zip(runtime).any(|(g, w)| !g.starts_with(w)) {
        return Err(format!("runtime frames {rest:?} are not {runtime:?}"));
    }
    Ok(())
}

/// The fixture's rows of `families`: every one must be one of `lang`'s
/// chains, and every chain of those families must have exactly one row,
/// with exactly `n` × its per-request count and bytes.
fn assert_truth(a: &Attribution, lang: Lang, pid: u32, families: &[Family], n: u64) {
    let binary = lang.binary().display().to_string();
    assert_truth_in(a, lang, pid, families, n, &binary);
}

/// [`assert_truth`] for the fixture's code mapped from `binary` (its path
/// as in the process's maps).
pub(super) fn assert_truth_in(
    a: &Attribution,
    lang: Lang,
    pid: u32,
    families: &[Family],
    n: u64,
    binary: &str,
) {
    let rows: Vec<&StackRow> = a
        .stacks
        .rows
        .iter()
        .filter(|r| r.pid == pid && families.contains(&r.family))
        .collect();
    let chains: Vec<&Chain> = lang
        .chains()
        .iter()
        .filter(|c| families.contains(&family_of(c.event)))
        .collect();
    let mut matched: BTreeMap<usize, Vec<&StackRow>> = BTreeMap::new();
    for r in &rows {
        let s = r
            .stack
            .as_ref()
            .and_then(|id| a.stacks.stacks.get(id))
            .unwrap_or_else(|| panic!("{lang:?}: {} x{} has no user stack", r.event, r.count));
        let mut why = Vec::new();
        let mut hits = Vec::new();
        for (ci, c) in chains.iter().enumerate() {
            if !event_matches(c, r) {
                continue;
            }
            match check_stack(lang, c, s, binary) {
                Ok(()) => hits.push(ci),
                Err(e) => why.push(format!("  vs {} at {}: {e}", c.event, c.frames[0].0)),
            }
        }
        assert_eq!(
            hits.len(),
            1,
            "{lang:?}: {} x{} matches {} chains of the truth:\n{}{}",
            r.event,
            r.count,
            hits.len(),
            render(s),
            why.join("\n")
        );
        matched.entry(hits[0]).or_default().push(r);
    }
    for (ci, c) in chains.iter().enumerate() {
        let got: Vec<(u64, u64, bool)> = matched
            .get(&ci)
            .map(|rs| rs.iter().map(|r| (r.count, r.amount, r.inner)).collect())
            .unwrap_or_default();
        assert_eq!(
            got,
            vec![(n * c.per_request, n * c.per_request * c.bytes, c.inner)],
            "{lang:?}: {} at {} ({}): one stack, exactly {n} x {} (count, amount, inner)",
            c.event,
            c.frames[0].0,
            lang.at(c.frames[0].1),
            c.per_request
        );
    }
}

pub(super) fn print_one_stack_per_event(a: &Attribution, pid: u32) {
    for r in a.stacks.rows.iter().filter(|r| r.pid == pid) {
        if let Some(s) = r.stack.as_ref().and_then(|id| a.stacks.stacks.get(id)) {
            println!(
                "{} {} x{} ({} B/ns):\n{}",
                r.family,
                r.event,
                r.count,
                r.amount,
                render(s)
            );
        }
    }
}

const N: u64 = 500;

fn exact_stacks(test: &str, lang: Lang, families: &[Family]) {
    if !root_or_skip(test) {
        return;
    }
    let _g = probes_shared();
    let mut fx = Fixture::start(lang.binary());
    let a = measure(&mut fx, families, N);
    print_one_stack_per_event(&a, fx.pid());
    assert_truth(&a, lang, fx.pid(), families, N);
}

#[test]
fn c_stacks_without_frame_pointers_and_their_exact_counts_equal_the_truth() {
    exact_stacks(
        "c_stacks_without_frame_pointers_and_their_exact_counts_equal_the_truth",
        Lang::C,
        &[Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls],
    );
}

#[test]
fn cxx_stacks_through_libstdcxx_and_their_exact_counts_equal_the_truth() {
    exact_stacks(
        "cxx_stacks_through_libstdcxx_and_their_exact_counts_equal_the_truth",
        Lang::Cxx,
        &[Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls],
    );
}

#[test]
fn rust_release_stacks_and_their_exact_counts_equal_the_truth() {
    exact_stacks(
        "rust_release_stacks_and_their_exact_counts_equal_the_truth",
        Lang::Rust,
        &[Family::Alloc, Family::Syscalls],
    );
}

/// The Rust fixture built for `x86_64-unknown-linux-musl`, as Alpine-style
/// images ship Rust servers: a static executable with musl's malloc and
/// free inside it (no libc.so, no GOT slot to read). Both allocator layers
/// (Rust's shims outer, musl's malloc and free inner) are exact per site
/// with whole stacks down to musl's `libc_start_main_stage2`; so are the
/// syscalls, through musl's wrappers (no unwind tables: rig's rows for them
/// come from the stack height analysis of their machine code).
#[test]
fn rust_static_musl_allocations_and_syscalls_are_exact_with_whole_stacks() {
    let test = "rust_static_musl_allocations_and_syscalls_are_exact_with_whole_stacks";
    if !root_or_skip(test) {
        return;
    }
    let binary = Lang::RustMusl.binary();
    assert!(
        binary.exists(),
        "{test}: {} was not built: Rust's x86_64-unknown-linux-musl target is not installed \
         (scripts/deps.sh installs it: rustup target add x86_64-unknown-linux-musl)",
        binary.display()
    );
    let _g = probes_shared();
    let mut fx = Fixture::start(binary);
    let a = measure(&mut fx, &[Family::Alloc, Family::Syscalls], N);
    print_one_stack_per_event(&a, fx.pid());
    assert_truth(&a, Lang::RustMusl, fx.pid(), &[Family::Alloc], N);
    let layers: Vec<(String, u64, bool)> = a
        .alloc_layers
        .iter()
        .map(|l| {
            let all = l.totals.allocations;
            (l.allocator.clone(), all, l.inner_allocations == all)
        })
        .collect();
    assert_eq!(
        layers,
        vec![
            ("musl".to_string(), 2 * N, true),
            ("rust".to_string(), 2 * N, false)
        ],
        "musl's malloc is found in the executable and is the inner layer"
    );
    // Each syscall at one whole stack: musl's wrapper (and `sccp`, the
    // cancellation point it calls), std's frames, then the truth's frames
    // of the fixture and the runtime's, exactly.
    let own = |f: &Site| {
        f.file
            .as_deref()
            .is_some_and(|p| Path::new(p).file_name() == Some("stackcalib.rs".as_ref()))
    };
    for (call, musl) in [
        ("getppid", &["getppid"][..]),
        ("read", &["sccp", "read"][..]),
        ("write", &["sccp", "write"][..]),
    ] {
        let rows: Vec<&StackRow> = a
            .stacks
            .rows
            .iter()
            .filter(|r| r.pid == fx.pid() && r.family == Family::Syscalls && r.event == call)
            .collect();
        assert_eq!(rows.len(), 1, "{call}: one stack");
        assert_eq!(rows[0].count, N, "{call}: exactly one per request");
        let s = &a.stacks.stacks[rows[0].stack.as_ref().unwrap()];
        assert!(
            s.incomplete.is_empty(),
            "{call}: {:?}\n{}",
            s.incomplete,
            render(s)
        );
        let names: Vec<&str> = s.frames.iter().map(name).collect();
        assert_eq!(&names[..musl.len()], musl, "{call}:\n{}", render(s));
        let chain = Lang::RustMusl
            .chains()
            .iter()
            .find(|c| c.event == call)
            .unwrap();
        let first = s.frames.iter().position(own).unwrap();
        assert!(
            names[musl.len()..first].iter().all(|n| is_rust_std(n)),
            "{call}: only std between musl and the fixture:\n{}",
            render(s)
        );
        let fixture: Vec<(&str, Option<String>)> = s.frames[first..first + chain.frames.len()]
            .iter()
            .map(|f| (base_name(name(f)), f.file_line()))
            .collect();
        let truth: Vec<(&str, Option<String>)> = chain
            .frames
            .iter()
            .map(|(function, marker)| (*function, Some(Lang::RustMusl.at(marker))))
            .collect();
        assert_eq!(fixture, truth, "{call}:\n{}", render(s));
        let runtime = &names[first + chain.frames.len()..];
        assert!(
            runtime.len() == RS_MUSL_RUNTIME.len()
                && runtime
                    .iter()
                    .zip(RS_MUSL_RUNTIME)
                    .all(|(g, w)| g.starts_with(w)),
            "{call}: runtime frames {runtime:?}"
        );
    }
}

/// gdb's frames at one stop: (pc, function) per physical frame, innermost
/// first (inlined frames share their caller's pc and are left out).
pub(super) type GdbStack = Vec<(u64, String)>;

/// `rig_dump()` prints the stopped thread's frames; `$_rig_under("f")` is 1
/// when a frame of the stopped thread is function `f` (a breakpoint
/// condition: stop only under that caller).
const GDB_DUMP: &str = r#"
import gdb
def rig_dump():
    f = gdb.newest_frame()
    while f is not None:
        if f.type() != gdb.INLINE_FRAME:
            print("FRAME %#x %s" % (f.pc(), f.name()))
        f = f.older()
    print("END")

class RigUnder(gdb.Function):
    def __init__(self):
        super(RigUnder, self).__init__("_rig_under")
    def invoke(self, name):
        name = name.string()
        f = gdb.newest_frame()
        while f is not None:
            if f.name() == name:
                return 1
            f = f.older()
        return 0
RigUnder()
"#;

/// Attach gdb to process `pid`, stop at every `stops` (gdb commands such as
/// `break *0x...` or `catch syscall getppid`), call `send` to have ONE
/// request served, and return gdb's backtrace at each of the `hits` stops
/// it makes (`syscall_hits` of them at syscalls, each of which gdb also
/// stops at on the syscall's return: those stops are left out). The
/// answer is the caller's to read, after gdb has detached.
pub(super) fn gdb_backtraces(
    pid: u32,
    stops: &[String],
    hits: usize,
    syscall_hits: usize,
    send: impl FnOnce(),
) -> Vec<GdbStack> {
    let dir = std::env::temp_dir().join(format!("rig-stacks-gdb-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("dump.py");
    std::fs::write(&script, GDB_DUMP).unwrap();
    let mut args: Vec<String> = vec![
        "-nx".into(),
        "-batch".into(),
        "-iex".into(),
        "set debuginfod enabled off".into(),
        // Go binaries name the runtime's gdb script; it is not needed to
        // unwind, and loading it would depend on the Go tree installed.
        "-iex".into(),
        "set auto-load python-scripts off".into(),
        "-p".into(),
        pid.to_string(),
        "-ex".into(),
        "set pagination off".into(),
        "-ex".into(),
        "set backtrace past-main on".into(),
        "-x".into(),
        script.display().to_string(),
    ];
    for s in stops {
        args.extend(["-ex".into(), s.clone()]);
    }
    args.extend(["-ex".into(), "python print('ARMED'); gdb.flush()".into()]);
    for _ in 0..hits + syscall_hits {
        args.extend(["-ex".into(), "continue".into()]);
        args.extend(["-ex".into(), "python rig_dump()".into()]);
    }
    args.extend(["-ex".into(), "delete".into(), "-ex".into(), "detach".into()]);
    let mut gdb = Command::new("gdb")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gdb runs (scripts/deps.sh installs it)");
    let mut out = BufReader::new(gdb.stdout.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let err = gdb.wait_with_output().unwrap();
            panic!(
                "gdb exited before arming:\n{log}{}",
                String::from_utf8_lossy(&err.stderr)
            );
        }
        log.push_str(&line);
        if line.trim() == "ARMED" {
            break;
        }
    }
    send();
    // gdb's output, read on a thread so a stop that never comes (e.g. a
    // breakpoint lost to a uprobe) ends the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut stacks = Vec::new();
    let mut cur: GdbStack = Vec::new();
    // `catch syscall` stops at the call and again at its return: the
    // return stops are left out (same stack, but not a counted event).
    let mut returned = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = gdb.kill();
                let _ = gdb.wait();
                panic!("gdb made fewer than {hits} stops in 60 s:\n{log}");
            }
        };
        log.push_str(&line);
        log.push('\n');
        if line.contains("(returned from syscall ") {
            returned = true;
        } else if let Some(rest) = line.strip_prefix("FRAME ") {
            let (pc, f) = rest.split_once(' ').unwrap();
            let pc = u64::from_str_radix(pc.trim_start_matches("0x"), 16).unwrap();
            cur.push((pc, f.to_string()));
        } else if line == "END" {
            let stack = std::mem::take(&mut cur);
            if !std::mem::take(&mut returned) {
                stacks.push(stack);
            }
        }
    }
    reader.join().unwrap();
    let status = gdb.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "gdb: {status}\n{log}");
    assert_eq!(stacks.len(), hits, "gdb stopped at {hits} events:\n{log}");
    stacks
}

/// A code location independent of where a process mapped its modules:
/// (module path, file offset).
pub(super) type Code = (String, u64);

/// The executable file mappings of `pid`: (start, end, file offset, path).
pub(super) fn text_maps(pid: u32) -> Vec<(u64, u64, u64, String)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut out = Vec::new();
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || !f[5].starts_with('/') {
            continue;
        }
        let (a, b) = f[0].split_once('-').unwrap();
        let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
        out.push((hex(a), hex(b), hex(f[2]), f[5].to_string()));
    }
    out
}

pub(super) fn code_of(maps: &[(u64, u64, u64, String)], pc: u64) -> Code {
    let (start, _, off, path) = maps
        .iter()
        .find(|(s, e, _, _)| *s <= pc && pc < *e)
        .unwrap_or_else(|| panic!("{pc:#x} in no executable mapping: {maps:#x?}"));
    (path.clone(), pc - start + off)
}

pub(super) fn addr_of(maps: &[(u64, u64, u64, String)], code: &Code) -> u64 {
    let (start, _, off, _) = maps
        .iter()
        .find(|(s, e, o, p)| *p == code.0 && *o <= code.1 && code.1 < o + (e - s))
        .unwrap_or_else(|| panic!("{code:x?} not mapped: {maps:#x?}"));
    start + code.1 - off
}

/// For one request, gdb's backtrace at every counted event's probe point
/// (`break *` the exact instruction rig's stack starts at; `catch syscall`
/// for syscalls) equals rig's stack frame by frame: the same code address
/// (module and offset) in every frame, and the same function names in the
/// fixture's frames.
///
/// gdb runs on a second process of the same fixture, which never had a
/// uprobe: in a process that had one, the kernel rewrites probed
/// instructions whenever ANY uprobe on the same file (here libc, probed by
/// every rig session on the machine) is unregistered, and that silently
/// removes gdb's breakpoints there.
fn stacks_equal_gdb(test: &str, lang: Lang, families: &[Family]) {
    if !root_or_skip(test) {
        return;
    }
    let _g = probes_shared();
    let mut measured = Fixture::start(lang.binary());
    let a = measure(&mut measured, families, 50);
    let pid = measured.pid();
    drop(measured);
    // rig's stacks, each as many times as it occurs per request; read is
    // left out (gdb attaches while the fixture is already in it).
    let mut want: Vec<(&StackRow, &StackFrames, Vec<Code>)> = Vec::new();
    let mut breaks = std::collections::BTreeSet::new();
    let mut syscalls = std::collections::BTreeSet::new();
    for r in a.stacks.rows.iter().filter(|r| r.pid == pid) {
        if r.event == "read" {
            continue;
        }
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        let code: Vec<Code> = s
            .frames
            .iter()
            .map(|f| (f.module.clone().unwrap(), f.module_offset))
            .collect();
        assert_eq!(r.count % 50, 0, "{}: {}", r.event, r.count);
        for _ in 0..r.count / 50 {
            want.push((r, s, code.clone()));
        }
        if r.family == Family::Syscalls {
            syscalls.insert(r.event.clone());
        } else {
            breaks.insert(code[0].clone());
        }
    }

    let mut fx = Fixture::start(lang.binary());
    fx.serve(5);
    let maps = text_maps(fx.pid());
    let mut stops: Vec<String> = breaks
        .iter()
        .map(|c| format!("break *{:#x}", addr_of(&maps, c)))
        .collect();
    stops.extend(syscalls.iter().map(|s| format!("catch syscall {s}")));
    let syscall_hits = want
        .iter()
        .filter(|(r, _, _)| r.family == Family::Syscalls)
        .count();
    let got = gdb_backtraces(fx.pid(), &stops, want.len(), syscall_hits, || fx.send());
    fx.answer();

    // The fixture's own functions (std's are named differently by gdb:
    // `{closure#0}` for rustc's `{{closure}}`).
    let own = |f: &Site| {
        f.file
            .as_deref()
            .is_some_and(|p| Path::new(p).file_name() == Some(lang.file().as_ref()))
    };
    let mut unmatched: Vec<Vec<(Code, String)>> = Vec::new();
    for g in got {
        let g: Vec<(Code, String)> = g
            .into_iter()
            .map(|(pc, f)| (code_of(&maps, pc), f))
            .collect();
        let at = want.iter().position(|(_, s, code)| {
            code.len() == g.len()
                && code.iter().zip(&g).all(|(c, (gc, _))| c == gc)
                && s.frames
                    .iter()
                    .zip(&g)
                    .all(|(f, (_, gname))| !own(f) || base_name(name(f)) == base_name(gname))
        });
        match at {
            Some(i) => {
                let (r, s, _) = want.remove(i);
                println!("gdb == rig for {} {}:\n{}", r.family, r.event, render(s));
            }
            None => unmatched.push(g),
        }
    }
    let left: Vec<String> = want
        .iter()
        .map(|(r, s, _)| format!("{} {}:\n{}", r.family, r.event, render(s)))
        .collect();
    assert!(
        unmatched.is_empty() && left.is_empty(),
        "{lang:?}: gdb stacks matching no rig stack: {unmatched:#x?}\nrig stacks gdb did not see:\n{}",
        left.join("\n")
    );
}

#[test]
fn c_stacks_equal_gdb_backtraces_at_the_same_breakpoints() {
    stacks_equal_gdb(
        "c_stacks_equal_gdb_backtraces_at_the_same_breakpoints",
        Lang::C,
        &[Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls],
    );
}

#[test]
fn cxx_stacks_equal_gdb_backtraces_at_the_same_breakpoints() {
    stacks_equal_gdb(
        "cxx_stacks_equal_gdb_backtraces_at_the_same_breakpoints",
        Lang::Cxx,
        &[Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls],
    );
}

#[test]
fn rust_stacks_equal_gdb_backtraces_at_the_same_breakpoints() {
    stacks_equal_gdb(
        "rust_stacks_equal_gdb_backtraces_at_the_same_breakpoints",
        Lang::Rust,
        &[Family::Alloc, Family::Syscalls],
    );
}

/// The disassembly of each function of `binary`, by demangled name
/// without parameters (`objdump -d -C`; Rust names keep their path).
fn functions(binary: &Path) -> BTreeMap<String, String> {
    let out = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(binary)
        .output()
        .expect("objdump runs (scripts/deps.sh installs binutils)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut fns = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for l in text.lines() {
        if let Some(head) = l.split_once(" <").filter(|_| l.ends_with(">:")) {
            if let Some((n, body)) = cur.take() {
                fns.insert(n, body);
            }
            let n = head.1.trim_end_matches(">:");
            let n = n.split('(').next().unwrap_or(n);
            cur = Some((n.to_string(), String::new()));
        } else if let Some((_, body)) = cur.as_mut() {
            body.push_str(l);
            body.push('\n');
        }
    }
    if let Some((n, body)) = cur {
        fns.insert(n, body);
    }
    fns
}

#[test]
fn stack_fixtures_have_no_frame_pointers_but_have_eh_frame() {
    for lang in Lang::ALL {
        let fns = functions(lang.binary());
        let mut names: Vec<&str> = lang
            .chains()
            .iter()
            .flat_map(|c| c.frames.iter().map(|(f, _)| *f))
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(names.len() >= 16, "{lang:?}: {names:?}");
        for n in names {
            let rust = format!("stackcalib_rs::{n}");
            let body = match lang {
                Lang::Rust => fns.get(&rust),
                _ => fns.get(n),
            }
            .unwrap_or_else(|| panic!("{lang:?}: no function {n} in the binary"));
            // A frame-pointer prologue sets rbp from rsp.
            assert!(
                !body.contains("%rsp,%rbp"),
                "{lang:?}: {n} keeps a frame pointer:\n{body}"
            );
            if n.ends_with("_level3") && lang != Lang::Rust {
                assert!(
                    body.contains("$0x5afe5afe5afe,%rbp"),
                    "{lang:?}: {n} does not overwrite rbp:\n{body}"
                );
            }
        }
        let sections = Command::new("readelf")
            .args(["-S", "-W"])
            .arg(lang.binary())
            .output()
            .unwrap();
        let sections = String::from_utf8(sections.stdout).unwrap();
        assert!(
            sections.contains(" .eh_frame "),
            "{lang:?}: no .eh_frame:\n{sections}"
        );
    }
}
