//! The JVM (HotSpot's `libjvm.so`, as OpenJDK ships it): Java code's
//! objects, copies and locks are the JVM's own, not the C library's, so
//! the families that count those say so by name, with the JVM's own
//! markers that would count them. Its JIT code (compiled methods, the
//! template interpreter, stubs) is named from the perf map rig has it
//! write with `jcmd PID Compiler.perfmap`, and walked by frame pointer
//! where it keeps them (`-XX:+PreserveFramePointer`, read from the
//! running JVM's own flag).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{JitFrames, Mapped, MarkerCounts, MarkerLock, Module, ObjectSizes, Runtime};

/// How long `jcmd` may take (it starts a JVM of its own, and the target
/// starts its attach listener): past it, it is killed and the names are
/// said missing.
const JCMD_TIMEOUT: Duration = Duration::from_secs(30);

/// HotSpot's `libjvm.so` (any JVM that exports the JNI invocation API).
pub struct Jvm;

impl Runtime for Jvm {
    fn name(&self) -> &'static str {
        "jvm"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.facts.lookup_symbol("JNI_CreateJavaVM").is_some()
    }

    fn unseen(&self, m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Option<String> {
        let why = match family {
            "alloc" if flag(m, at, "DTraceAllocProbes") == Some(true) => {
                "the Java heap's arrays' bytes: its objects are counted, by class, from the \
                 JVM's hotspot:object__alloc marker (the `java` layer; \
                 usdt:hotspot:object__alloc in the user family), and an object's bytes are \
                 its class's instance size, from the JVM's class histogram read at the \
                 window's end (`jcmd PID GC.class_histogram -all`); an array's size varies \
                 with its length, and the size that marker passes is not the object's for \
                 objects C1-compiled code makes (OpenJDK 17's Runtime1 stub passes none: a \
                 24-byte object read as 2624), so arrays' bytes are not counted"
            }
            "locks" if flag(m, at, "DTraceMonitorProbes") == Some(true) => {
                "Java's uncontended monitor enters and java.util.concurrent locks: an \
                 atomic instruction in Java code, not counted; contended monitor enters are \
                 counted, with their waits, from the JVM's hotspot:monitor__contended__enter \
                 and __entered markers (`monitor enter (contended)`)"
            }
            "alloc" => {
                "the Java heap: objects Java code makes (`new`, arrays, strings) are placed \
                 by the JVM in its own garbage-collected heap, not by malloc, and are not \
                 counted (only the JVM's own mallocs are); started with \
                 -XX:+DTraceAllocProbes, the JVM fires its hotspot:object__alloc marker for \
                 each one, and `--usdt 'hotspot:object__alloc#1/2'` counts them by class"
            }
            "copy" => {
                "Java's array and string copies run in the JIT's own arraycopy stubs and \
                 intrinsics, not in calls to the C library's memcpy, and are not counted"
            }
            "locks" => {
                "Java's monitors (`synchronized`) and java.util.concurrent locks are the \
                 JVM's own, not the C library's mutexes: an uncontended one is an atomic \
                 instruction in Java code and is not counted; started with \
                 -XX:+DTraceMonitorProbes, the JVM fires hotspot:monitor__contended__enter \
                 and __entered for each contended monitor enter, which the locks family then \
                 counts, with its wait"
            }
            _ => return None,
        };
        Some(why.to_string())
    }

    /// Compiled Java code keeps rbp as a frame pointer only when the JVM
    /// runs with -XX:+PreserveFramePointer (the template interpreter and
    /// the stubs always do); the flag is read from the JVM's memory, so
    /// it holds however it was set (command line, JAVA_TOOL_OPTIONS, an
    /// options file).
    fn jit_frames(&self, m: &Module<'_>, at: &Mapped<'_>) -> Option<JitFrames> {
        Some(match flag(m, at, "PreserveFramePointer") {
            Some(false) => JitFrames::Without(
                "the JVM runs without -XX:+PreserveFramePointer, so its compiled Java code \
                 uses rbp as a general register and a walk cannot pass it (started with the \
                 flag, rig walks whole Java stacks)"
                    .into(),
            ),
            Some(true) => JitFrames::FramePointers,
            None => JitFrames::Without(format!(
                "rig could not read the JVM's PreserveFramePointer flag from {} (no .symtab, \
                 or the process is gone)",
                at.path
            )),
        })
    }

    fn write_jit_names(&self, _m: &Module<'_>, at: &Mapped<'_>) -> Option<Result<String, String>> {
        Some(perf_map(at))
    }

    /// Its classes' instance sizes, where it fires its object marker.
    fn object_sizes(&self, m: &Module<'_>, at: &Mapped<'_>) -> Option<ObjectSizes> {
        (flag(m, at, "DTraceAllocProbes") == Some(true)).then(|| ObjectSizes {
            marker: "hotspot:object__alloc",
            sizes: instance_sizes(at),
        })
    }

    /// With -XX:+DTraceAllocProbes the JVM fires a marker for every
    /// object (the flag read from the running JVM); it fires its
    /// collection marker always.
    fn implied_markers(&self, m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Vec<&'static str> {
        let mut out = Vec::new();
        if family == "alloc" {
            if flag(m, at, "DTraceAllocProbes") == Some(true) {
                out.push("hotspot:object__alloc#1/2");
            }
            out.push("hotspot:gc__begin");
        }
        let markers = crate::elf::usdt::markers(at.open);
        out.retain(|spec| {
            let (pn, _) = spec.split_once('#').unwrap_or((spec, ""));
            markers.as_ref().is_ok_and(|ms| {
                ms.0.iter()
                    .any(|mk| pn == format!("{}:{}", mk.provider, mk.name))
            })
        });
        out
    }

    /// With -XX:+DTraceMonitorProbes (read from the running JVM) it marks
    /// every contended monitor enter: where its thread starts to wait, and
    /// where it has the monitor.
    fn marker_locks(&self, m: &Module<'_>, at: &Mapped<'_>) -> Vec<MarkerLock> {
        if flag(m, at, "DTraceMonitorProbes") != Some(true) {
            return Vec::new();
        }
        vec![MarkerLock {
            waits: ("hotspot", "monitor__contended__enter"),
            acquired: ("hotspot", "monitor__contended__entered"),
            op: rig_ebpf::abi::lock_op::JVM_MONITOR,
            counts: "every contended monitor enter (`synchronized`), its wait from \
                     hotspot:monitor__contended__enter to __entered",
        }]
    }

    /// Java objects and collections are the `java` layer of the alloc
    /// family, beside the JVM's own mallocs.
    fn marker_layer(&self, marker: (&str, &str)) -> Option<(&'static str, MarkerCounts)> {
        match marker {
            ("hotspot", "object__alloc") => Some(("java", MarkerCounts::Objects)),
            ("hotspot", "gc__begin") => Some(("java", MarkerCounts::Collections)),
            _ => None,
        }
    }

    /// One blob of JIT code interprets every method not compiled yet.
    fn jit_function(&self, name: &str) -> Option<String> {
        (name == "Interpreter").then(|| "[interpreted Java]".to_string())
    }

    /// A compiled Java method is named `RETURN CLASS.METHOD(ARGS)` (JDK
    /// 17's `Compiler.perfmap`); every other blob is the JVM's own: stubs
    /// (`StubRoutines (1)`, `dtrace_object_alloc Runtime1 stub`,
    /// `_new_instance_Java`), adapters. The interpreter is the program's:
    /// it runs a Java method not compiled yet.
    fn jit_own_code(&self, name: &str) -> bool {
        name != "[interpreted Java]" && !is_java_method(name)
    }
}

/// Whether a perf map name is a compiled Java method's: a return type, a
/// space, then `CLASS.METHOD(ARGS)` with no space before the `(`.
fn is_java_method(name: &str) -> bool {
    let Some((ret, rest)) = name.split_once(' ') else {
        return false;
    };
    let Some((method, args)) = rest.split_once('(') else {
        return false;
    };
    !ret.is_empty() && method.contains('.') && !method.contains(' ') && args.ends_with(')')
}

/// The value of the running JVM's boolean flag `name` (a `.symtab`
/// variable of libjvm.so, read from its memory: it holds however the flag
/// was set, command line, JAVA_TOOL_OPTIONS or an options file); `None`
/// when it cannot be read.
fn flag(m: &Module<'_>, at: &Mapped<'_>, name: &str) -> Option<bool> {
    let v = m.facts.variable(name)?;
    at.read_u8(m.facts, v).map(|b| b != 0)
}

/// Have the JVM write its perf map now (`jcmd PID Compiler.perfmap`,
/// JDK 17 on): what was done, or why Java frames stay unnamed.
fn perf_map(at: &Mapped<'_>) -> Result<String, String> {
    let (said, asked) = jcmd(at, "Compiler.perfmap", &[])
        .map_err(|e| format!("{e}; Java frames are unnamed addresses"))?;
    if said.contains("Command executed successfully") {
        Ok(format!(
            "Java code named from the JVM's perf map, written at the window's end by {asked}"
        ))
    } else {
        Err(format!(
            "{asked} failed: {said}; Java frames are unnamed addresses"
        ))
    }
}

/// Each class's instance size in bytes, from the JVM's own class
/// histogram (`jcmd PID GC.class_histogram -all`: every object on the
/// heap, reachable or not, without a collection), keyed by the class's
/// internal name as `hotspot:object__alloc` passes it (`java/lang/String`,
/// `Server$Item`). Arrays are left out: their size varies with their
/// length.
fn instance_sizes(at: &Mapped<'_>) -> Result<BTreeMap<String, u64>, String> {
    let (said, asked) = jcmd(at, "GC.class_histogram", &["-all"])?;
    let sizes = parse_histogram(&said);
    if sizes.is_empty() {
        return Err(format!("{asked} listed no class: {said}"));
    }
    Ok(sizes)
}

/// A class histogram's rows (`   48:   344   8256  Server$Item (module)`)
/// as instance sizes: bytes ÷ instances, for classes (not arrays) whose
/// bytes divide evenly.
fn parse_histogram(said: &str) -> BTreeMap<String, u64> {
    said.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            f.next()?.strip_suffix(':')?.parse::<u64>().ok()?;
            let instances: u64 = f.next()?.parse().ok()?;
            let bytes: u64 = f.next()?.parse().ok()?;
            let class = f.next()?;
            let whole = instances > 0 && bytes.is_multiple_of(instances);
            (whole && !class.starts_with('[')).then(|| (class.replace('.', "/"), bytes / instances))
        })
        .collect()
}

/// Run `jcmd PID COMMAND ARGS` of the JDK the JVM at `at` runs from (in its
/// own root): its output, and the command as written, for the notes.
fn jcmd(at: &Mapped<'_>, command: &str, args: &[&str]) -> Result<(String, String), String> {
    // JAVA_HOME/lib/server/libjvm.so -> JAVA_HOME/bin/jcmd
    let home = Path::new(at.path.trim_end_matches(" (deleted)"))
        .ancestors()
        .nth(3)
        .ok_or("libjvm.so is not under a JDK's lib/server")?;
    let jcmd = PathBuf::from(format!("/proc/{}/root", at.pid))
        .join(home.strip_prefix("/").unwrap_or(home))
        .join("bin/jcmd");
    if !jcmd.exists() {
        return Err(format!(
            "no jcmd in {}/bin (a JRE without the JDK's tools)",
            home.display()
        ));
    }
    let pid = at.pid.to_string();
    let asked = format!(
        "`{} {pid} {command}{}`",
        jcmd.display(),
        args.iter().map(|a| format!(" {a}")).collect::<String>()
    );
    let mut child = Command::new(&jcmd)
        .arg(&pid)
        .arg(command)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{asked} could not start: {e}"))?;
    // Read as it writes: a histogram is more than a pipe holds.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if t0.elapsed() < JCMD_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{asked} did not answer within {JCMD_TIMEOUT:?}"));
            }
        }
    };
    let said = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    // jcmd exits 0 also when the command failed in the target: its answer
    // says, and the caller reads it.
    if status.success() {
        Ok((said, asked))
    } else {
        Err(format!(
            "{asked} failed ({status}): {}",
            format!("{said} {err}")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenJDK 17's `GC.class_histogram -all`, cut: classes by their
    /// internal names and instance sizes; arrays, the header, the total
    /// and a class whose bytes do not divide left out.
    #[test]
    fn a_class_histogram_gives_instance_sizes_of_classes_not_arrays() {
        let said = "12345:\n \
            num     #instances         #bytes  class name (module)\n\
            -------------------------------------------------------\n   \
            1:          9370         955048  [B (java.base@17.0.15)\n   \
            3:         24808         595392  java.lang.String (java.base@17.0.15)\n  \
            48:           344           8256  Server$Item\n  \
            50:             3            100  Odd\n\
            Total         34522        1558696\n";
        let sizes = parse_histogram(said);
        assert_eq!(
            sizes.into_iter().collect::<Vec<_>>(),
            [
                ("Server$Item".to_string(), 24),
                ("java/lang/String".to_string(), 24)
            ]
        );
    }
}
