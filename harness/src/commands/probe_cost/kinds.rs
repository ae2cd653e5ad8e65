//! The kinds of probe `rig probe-cost` measures: which fixture loops on
//! which call, how rig attaches to it, and where bpftrace would.

use super::*;

/// Which loop program a kind runs.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Fixture {
    /// calib/hitloop.c (glibc).
    C,
    /// go/gohitloop (Go, no cgo).
    Go,
    /// python/hitloop.py, run by Debian's CPython (link-time optimized,
    /// with its USDT markers).
    Python,
}

/// Debian 12's CPython, the one the Python kinds measure.
pub(super) const PYTHON: &str = "/usr/bin/python3.11";

impl Fixture {
    /// The command that runs the loop program (its arguments follow).
    pub(super) fn command(self) -> Command {
        match self {
            Fixture::C => Command::new(rig_fixtures::hitloop()),
            Fixture::Go => Command::new(rig_fixtures::gohitloop()),
            Fixture::Python => {
                let mut c = Command::new(PYTHON);
                c.arg(rig_fixtures::python_hitloop());
                c
            }
        }
    }

    /// Why the loop program cannot run here, if it cannot.
    pub(super) fn missing(self) -> Option<String> {
        (self == Fixture::Python && !std::path::Path::new(PYTHON).exists())
            .then(|| format!("no {PYTHON} (Debian 12's python3.11)"))
    }

    /// Frames of the loop program itself under the probed call, counted
    /// from a backtrace at the probe (gdb's, inlined frames left out): C,
    /// 6 (the probed function, the loop, the last `descend`, main and
    /// libc's two start-up frames); Go's mallocgc, 7 (runtime.mallocgc,
    /// runtime.newobject, main.hitMalloc, the last main.descend,
    /// main.main, runtime.main, runtime.goexit); Go's syscall, 6
    /// (syscall.rawSyscallNoError, main.hitSyscall with syscall.Getppid
    /// inlined, the last main.descend, main.main, runtime.main,
    /// runtime.goexit). CPython's are Python frames, 4 (<module>, main,
    /// the last descend and the hit function): its kinds sit 20 Python
    /// frames deep, under the interpreter's own native frames.
    pub(super) fn own_frames(self, hitloop: &str) -> u32 {
        match (self, hitloop) {
            (Fixture::Go, "malloc") => 7,
            (Fixture::Python, _) => 4,
            _ => 6,
        }
    }
}

/// The arms of one cost measurement.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Arm {
    Clean,
    Probed,
    Stacked,
    /// A bpftrace uprobe instead of rig's.
    Bpftrace,
}

/// Where bpftrace's uprobe goes, in the C library the hitloop maps.
#[derive(Clone, Copy)]
pub(super) enum BpftraceAt {
    /// At this exported function's entry, by name.
    Symbol(&'static str),
    /// At the implementation this IFUNC resolves to in the live hitloop, by
    /// address (glibc exports no name for it).
    Implementation(&'static str),
}

/// What to attach for one measurement.
pub(super) enum Attach {
    /// One program at one libc function.
    Single {
        program: &'static str,
        symbol: &'static str,
    },
    /// A whole family.
    Family,
    /// Probes a user names (`--usdt`, `--func` and `--interp-calls` as
    /// written).
    User(&'static str),
    /// One counting uprobe of a uprobe_multi link (as on CPython's inlined
    /// pymalloc paths) at a C library function: no stacks, so its stacked
    /// arm is the same probe.
    Counting { symbol: &'static str },
}

pub(super) struct Kind {
    pub(super) name: &'static str,
    /// The loop program, and the loop it runs.
    pub(super) fixture: Fixture,
    pub(super) hitloop: &'static str,
    pub(super) family: Family,
    pub(super) attach: Attach,
    pub(super) hits: &'static str,
    pub(super) hits_per_iteration: u32,
    /// The same function for bpftrace, for the probes `--against-bpftrace`
    /// compares.
    pub(super) bpftrace: Option<BpftraceAt>,
}

/// One row per probe, so a costly one is not hidden in an average: on x86 a
/// uprobe whose first instruction the kernel can emulate (push, jmp) is far
/// cheaper than one it must single-step out of line (mov, test).
pub(super) const KINDS: &[Kind] = &[
    Kind {
        name: "malloc entry",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_arg1",
            symbol: "malloc",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // Every allocator entry point also has this uretprobe: the return of
    // a thread's outer allocator call is what ends it, so a malloc or free
    // costs the entry's hit plus this one.
    Kind {
        name: "malloc return",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_ret",
            symbol: "malloc",
        },
        hits: "uretprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // The probe of the runs the alloc family does not count (CPython's
    // inlined pymalloc paths): a counter bumped by cookie, nothing else.
    Kind {
        name: "counting uprobe (uprobe_multi link, as on CPython's inlined pymalloc)",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Counting { symbol: "malloc" },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "free entry",
        fixture: Fixture::C,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Single {
            program: "rig_alloc_free",
            symbol: "free",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Symbol("free")),
    },
    Kind {
        name: "memcpy implementation entry",
        fixture: Fixture::C,
        hitloop: "memcpy",
        family: Family::Copy,
        attach: Attach::Single {
            program: "rig_copy",
            symbol: "memcpy",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Implementation("memcpy")),
    },
    Kind {
        name: "pthread_mutex_lock entry",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock",
            symbol: "pthread_mutex_lock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: Some(BpftraceAt::Symbol("pthread_mutex_lock")),
    },
    Kind {
        name: "pthread_mutex_lock return",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_lock_ret",
            symbol: "pthread_mutex_lock",
        },
        hits: "uretprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "pthread_mutex_unlock entry",
        fixture: Fixture::C,
        hitloop: "lock",
        family: Family::Locks,
        attach: Attach::Single {
            program: "rig_mutex_unlock",
            symbol: "pthread_mutex_unlock",
        },
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // The probes a user names: a USDT marker's `nop` (emulated) and a
    // function's entry (`push %rbp`, emulated), each attached as `--usdt`
    // and `--func` attach them.
    Kind {
        name: "USDT marker (--usdt)",
        fixture: Fixture::C,
        hitloop: "usdt",
        family: Family::User,
        attach: Attach::User("usdt hitloop:hit@0"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // Counted by a string argument, as the JVM's objects by class
    // (`#1/2`: a pointer and a length) and CPython's calls by function
    // (`#1`: up to the NUL) are.
    Kind {
        name: "USDT marker by its string (--usdt …#1/2)",
        fixture: Fixture::C,
        hitloop: "usdt_str",
        family: Family::User,
        attach: Attach::User("usdt hitloop:hit_str#1/2"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "USDT marker by its NUL-ended string (--usdt …#1)",
        fixture: Fixture::C,
        hitloop: "usdt_str",
        family: Family::User,
        attach: Attach::User("usdt hitloop:hit_str#1"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "function entry (--func)",
        fixture: Fixture::C,
        hitloop: "call",
        family: Family::User,
        attach: Attach::User("func hit_leaf"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "syscall enter + exit",
        fixture: Fixture::C,
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
        bpftrace: None,
    },
    // Go: the allocator probe (entry only: rig never plants a uretprobe in
    // Go code), attached as `--probes alloc` attaches it, and stacks walked
    // through Go frames, which have no `.eh_frame`.
    Kind {
        name: "Go runtime.mallocgc entry",
        fixture: Fixture::Go,
        hitloop: "malloc",
        family: Family::Alloc,
        attach: Attach::Family,
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    Kind {
        name: "Go syscall enter + exit",
        fixture: Fixture::Go,
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
        bpftrace: None,
    },
    // With stacks, each event of a Python process also reads the thread's
    // 20 Python frames from the interpreter's memory.
    Kind {
        name: "CPython syscall enter + exit",
        fixture: Fixture::Python,
        hitloop: "syscall",
        family: Family::Syscalls,
        attach: Attach::Family,
        hits: "raw tracepoints",
        hits_per_iteration: 2,
        bpftrace: None,
    },
    // CPython's calls by function: the marker (semaphore raised by rig)
    // keyed by the function's name.
    Kind {
        name: "CPython call by function (--usdt python:function__entry#1)",
        fixture: Fixture::Python,
        hitloop: "call",
        family: Family::User,
        attach: Attach::User("usdt python:function__entry#1"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
    // CPython's calls by function without a profile function: the
    // evaluator's handler of the instruction a call starts with, the frame
    // entered read from the interpreter's memory.
    Kind {
        name: "CPython call by function (--interp-calls python)",
        fixture: Fixture::Python,
        hitloop: "pycall",
        family: Family::User,
        attach: Attach::User("interp-calls python"),
        hits: "uprobe",
        hits_per_iteration: 1,
        bpftrace: None,
    },
];
