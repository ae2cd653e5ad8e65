//! Rust twins of the structs in `ebpf/bpf/*.h`. Each names its C twin; sizes
//! are asserted here and with `_Static_assert` on the C side.

use std::mem::size_of;

/// Slots of `struct rig_stats` (common.h `enum rig_stat`).
pub mod stat {
    pub const EVENTS: usize = 0;
    pub const MAP_FULL: usize = 1;
    pub const LOOKUP_FAIL: usize = 2;
    pub const READ_FAIL: usize = 3;
    pub const UNPAIRED: usize = 4;
    pub const PROBE_SYSCALLS: usize = 5;
    pub const STACK_FAIL: usize = 6;
    /// Events counted without their whole stack (not a loss: see common.h).
    pub const STACK_MISSING: usize = 7;
    pub const SLOTS: usize = 8;
}

/// C twin: `struct rig_stats` (common.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub slot: [u64; stat::SLOTS],
}
const _: () = assert!(size_of::<Stats>() == 64);

/// C twin: `struct rig_cookie_key` (common.h): the key of `attach_cookies`
/// in the objects built for kernels without `bpf_get_attach_cookie`; the
/// value is the cookie (u64) of the uprobe at `addr` in process `tgid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieKey {
    pub tgid: u32,
    pub pad: u32,
    pub addr: u64,
}
const _: () = assert!(size_of::<CookieKey>() == 16);

/// C twin: `struct sys_count` (syscalls.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysCount {
    pub count: u64,
    pub exits: u64,
    pub ns: u64,
}
const _: () = assert!(size_of::<SysCount>() == 24);

/// C twin: `struct sys_key` (syscalls.h). Value: `SysCount`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SysKey {
    pub tgid: u32,
    pub nr: u32,
}
const _: () = assert!(size_of::<SysKey>() == 8);

/// `RIG_NR_URETPROBE` (syscalls.h).
pub const NR_URETPROBE: u32 = 335;

/// Values of the `targets` map (common.h): this process only, or this
/// process and every process it forks; `TARGET_PENDING`, a process forked
/// into the tree whose uprobes are not attached yet.
pub const TARGET_ONE: u8 = 1;
pub const TARGET_TREE: u8 = 2;
pub const TARGET_PENDING: u8 = 3;

/// C twin: `enum alloc_kind` (alloc.h).
pub mod alloc_kind {
    pub const MALLOC: u32 = 1;
    pub const CALLOC: u32 = 2;
    pub const REALLOC: u32 = 3;
    pub const FREE: u32 = 4;
    pub const POSIX_MEMALIGN: u32 = 5;
    pub const MEMALIGN: u32 = 6;
    pub const ALIGNED_ALLOC: u32 = 7;
    pub const VALLOC: u32 = 8;
    pub const PVALLOC: u32 = 9;
    pub const CXX_NEW: u32 = 10;
    pub const CXX_NEW_ARRAY: u32 = 11;
    pub const CXX_DELETE: u32 = 12;
    pub const CXX_DELETE_ARRAY: u32 = 13;
    pub const MALLOCX: u32 = 14;
    pub const RALLOCX: u32 = 15;
    pub const SDALLOCX: u32 = 16;
    pub const DALLOCX: u32 = 17;
    pub const RUST_ALLOC: u32 = 18;
    pub const RUST_ALLOC_ZEROED: u32 = 19;
    pub const RUST_REALLOC: u32 = 20;
    pub const RUST_DEALLOC: u32 = 21;
    pub const GO_MALLOCGC: u32 = 22;
    pub const GO_GC: u32 = 23;
    /// An application's own allocator: an allocation, a free.
    pub const POOL_ALLOC: u32 = 24;
    pub const POOL_FREE: u32 = 25;
}
/// `ALLOC_KIND_MASK`, `ALLOC_ENTRY_SHIFT`, `ALLOC_ENTRY_MASK` (alloc.h): the
/// attach cookie is `kind | entry << ALLOC_ENTRY_SHIFT`.
pub const ALLOC_KIND_MASK: u32 = 0xff;
pub const ALLOC_ENTRY_SHIFT: u32 = 16;
pub const ALLOC_ENTRY_MASK: u32 = 0x7fff;
/// `ALLOC_COOKIE_NO_RETURN` (alloc.h): cookie bit of an entry point with no
/// uretprobe (its calls never become a thread's outer call).
pub const ALLOC_COOKIE_NO_RETURN: u32 = 1 << 8;

/// The `arg` of an allocation's stack key (alloc.bpf.c): `inner << 31 |
/// entry << 16 | kind << 8 | size class`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocStackArg {
    /// Made inside another allocator call.
    pub inner: bool,
    /// The attach cookie it came from: `kind | entry << ALLOC_ENTRY_SHIFT`.
    pub cookie: u32,
    /// The size class (`ALLOC_CLASS_NULL_FREE & 0xff`: a free of NULL).
    pub class: u32,
}

impl AllocStackArg {
    pub fn decode(arg: u32) -> AllocStackArg {
        let kind = (arg >> 8) & ALLOC_KIND_MASK;
        let entry = (arg >> 16) & ALLOC_ENTRY_MASK;
        AllocStackArg {
            inner: arg >> 31 == 1,
            cookie: kind | entry << ALLOC_ENTRY_SHIFT,
            class: arg & 0xff,
        }
    }

    /// The allocation kind (`alloc_kind`).
    pub fn kind(self) -> u32 {
        self.cookie & ALLOC_KIND_MASK
    }
}
/// `ALLOC_FLAG_INNER` (alloc.h): `AllocKey::flags` bit of a call made inside
/// another allocator call.
pub const ALLOC_FLAG_INNER: u32 = 1;
/// `ALLOC_CLASS_NULL_FREE` (alloc.h).
pub const ALLOC_CLASS_NULL_FREE: u32 = 0xffff_ffff;
/// `ALLOC_CLASS_UNSIZED` (alloc.h): an allocation whose size rig cannot read.
pub const ALLOC_CLASS_UNSIZED: u32 = 0xffff_fffe;

/// C twin: `struct alloc_key` (alloc.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocKey {
    pub caller: u64,
    pub kind: u32,
    pub size_class: u32,
    /// The process; `caller` is an address in its address space.
    pub tgid: u32,
    /// `ALLOC_FLAG_*`.
    pub flags: u32,
}
const _: () = assert!(size_of::<AllocKey>() == 24);

/// C twin: `struct alloc_val` (alloc.h); also `struct copy_val` (copy.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallsBytes {
    pub calls: u64,
    pub bytes: u64,
}
const _: () = assert!(size_of::<CallsBytes>() == 16);

/// C twin: `struct live_key` (alloc.h): a block the live heap holds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LiveKey {
    pub addr: u64,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<LiveKey>() == 16);

/// C twin: `struct live_val` (alloc.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveVal {
    /// As asked for.
    pub bytes: u64,
    /// Return address of the outermost allocator call.
    pub caller: u64,
    /// Its whole stack's id (0: stacks off).
    pub ustack: u64,
    /// Its attach cookie, as `AllocKey::kind`.
    pub kind: u32,
    /// The `live_epoch` it was made under.
    pub epoch: u32,
}
const _: () = assert!(size_of::<LiveVal>() == 32);

/// C twin: `enum live_count` (alloc.h): slots of `LiveCounts`.
pub mod live_count {
    pub const UNMATCHED_FREES: usize = 0;
    pub const DROPPED: usize = 1;
    pub const DROPPED_BYTES: usize = 2;
    pub const FAILED: usize = 3;
    pub const RECORDED: usize = 4;
}

/// C twin: `struct live_counts` (alloc.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    pub slot: [u64; 5],
}
const _: () = assert!(size_of::<LiveCounts>() == 40);

/// C twin: `struct copy_key` (copy.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKey {
    pub caller: u64,
    pub implementation: u32,
    pub bucket: u32,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<CopyKey>() == 24);

/// C twin: `struct user_key` (user.h). Value: `CallsBytes` (`struct
/// user_val`: calls, and the argument summed in `bytes`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserKey {
    pub caller: u64,
    pub site: u32,
    pub tgid: u32,
}
const _: () = assert!(size_of::<UserKey>() == 16);

/// C twin: `struct user_time_key` (user.h). Value: ns inside.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserTimeKey {
    pub site: u32,
    pub tgid: u32,
}
const _: () = assert!(size_of::<UserTimeKey>() == 8);

/// C twin: `struct user_arg` (user.h): where a site's summed argument is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserArg {
    /// `user_arg::*`.
    pub kind: u8,
    pub size: u8,
    pub is_signed: u8,
    /// `user_arg::TIMED`.
    pub flags: u8,
    pub reg_off: u16,
    pub _pad1: u16,
    /// The constant or the displacement; at an interpreter's call handler
    /// (`rig_user_interp`), the opcodes a call starts with (bits 0-7, 8-15).
    pub value: i64,
}
const _: () = assert!(size_of::<UserArg>() == 16);

/// C twin: `struct user_by_arg` (user.h): where a `USER_BY_STR` site's
/// string is, and its length (`len.kind` `NONE`: up to its NUL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserByArg {
    pub ptr: UserArg,
    pub len: UserArg,
}
const _: () = assert!(size_of::<UserByArg>() == 32);

/// C twin: `struct user_str_key` (user.h). Value: `CallsBytes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserStrKey {
    pub site: u32,
    pub tgid: u32,
    /// The user stack that made the calls (a `ustacks` id; 0 without).
    pub ustack: u64,
    /// The string, NUL-padded (`user_arg::STR` bytes).
    pub str: [u8; user_arg::STR],
}
const _: () = assert!(size_of::<UserStrKey>() == 72);

impl UserStrKey {
    /// The string up to its first NUL, bytes that are not UTF-8 replaced.
    pub fn text(&self) -> String {
        let end = self
            .str
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.str.len());
        String::from_utf8_lossy(&self.str[..end]).into_owned()
    }
}

/// C twin: `enum user_arg_kind` and `RIG_USER_SITES` (user.h).
pub mod user_arg {
    pub const NONE: u8 = 0;
    pub const CONST: u8 = 1;
    pub const REG: u8 = 2;
    pub const MEM: u8 = 3;
    /// Memory at the marker's own address + `value` (a global `sym(%rip)`).
    pub const IPREL: u8 = 4;
    /// `flags`: the site's function is timed (`--func-time`).
    pub const TIMED: u8 = 1;
    /// `flags`: the site's calls are also counted by a string argument.
    pub const BY_STR: u8 = 2;
    /// Bytes of a string argument kept (`RIG_USER_STR`).
    pub const STR: usize = 56;
    /// Sites (attach cookies) one probe set can hold.
    pub const SITES: usize = 4096;
}

/// C twin: `enum lock_op` (locks.h).
pub mod lock_op {
    pub const LOCK: u32 = 1;
    pub const TRYLOCK: u32 = 2;
    pub const UNLOCK: u32 = 3;
    /// Go's slow paths: sync.Mutex's lockSlow, RWMutex's reader and writer
    /// semaphore waits (each call a contended acquisition or wait).
    pub const GO_MUTEX: u32 = 4;
    pub const GO_RLOCK: u32 = 5;
    pub const GO_WLOCK: u32 = 6;
    /// The Go runtime's own locks (runtime.lock2), counted as pthread
    /// mutexes are.
    pub const GO_RUNTIME: u32 = 7;
    /// RWMutex's waits before Go 1.20 (sync.runtime_SemacquireMutex, called
    /// outside sync.Mutex's slow path).
    pub const GO_RWSEMA: u32 = 8;
    /// A runtime's contended acquisition between two markers (the JVM's
    /// monitor enters).
    pub const JVM_MONITOR: u32 = 9;
}

/// C twin: `struct lock_key` (locks.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub caller: u64,
    pub mutex: u64,
    pub op: u32,
    pub tgid: u32,
}
const _: () = assert!(size_of::<LockKey>() == 24);

/// C twin: `struct lock_val` (locks.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockVal {
    pub calls: u64,
    pub acquired: u64,
    pub contended: u64,
    pub futex_wait_ns: u64,
    pub call_ns: u64,
    pub holds: u64,
    pub hold_ns: u64,
    pub returns: u64,
}
const _: () = assert!(size_of::<LockVal>() == 64);

/// C twin: `struct fault_key` (faults.h). Value: u64 count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKey {
    pub ip: u64,
    pub kind: u32,
    pub in_kernel: u32,
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<FaultKey>() == 24);
pub const FAULT_MINOR: u32 = 0;
pub const FAULT_MAJOR: u32 = 1;

/// C twin: `struct sched_val` (sched.h). Key: u32 tid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedVal {
    pub voluntary: u64,
    pub involuntary: u64,
    pub off_cpu_ns: u64,
    pub tgid: u64,
}
const _: () = assert!(size_of::<SchedVal>() == 32);

// SAFETY: all of these are repr(C), fixed-width integers only, no padding
// holes (sizes asserted above), valid for any bit pattern.
unsafe impl aya::Pod for Stats {}
// SAFETY: repr(C), integers only, no padding (asserted size).
unsafe impl aya::Pod for CookieKey {}
unsafe impl aya::Pod for SysCount {}
unsafe impl aya::Pod for SysKey {}
unsafe impl aya::Pod for AllocKey {}
unsafe impl aya::Pod for CallsBytes {}
unsafe impl aya::Pod for LiveKey {}
unsafe impl aya::Pod for LiveVal {}
unsafe impl aya::Pod for LiveCounts {}
unsafe impl aya::Pod for CopyKey {}
unsafe impl aya::Pod for UserKey {}
unsafe impl aya::Pod for UserTimeKey {}
unsafe impl aya::Pod for UserArg {}
unsafe impl aya::Pod for UserByArg {}
unsafe impl aya::Pod for UserStrKey {}
unsafe impl aya::Pod for LockKey {}
unsafe impl aya::Pod for LockVal {}
unsafe impl aya::Pod for FaultKey {}
unsafe impl aya::Pod for SchedVal {}

/// C twin: `enum unwind_cfa` (stack.h).
pub mod unwind_cfa {
    pub const NONE: u8 = 0;
    pub const RSP: u8 = 1;
    pub const RBP: u8 = 2;
    pub const PLT: u8 = 3;
    pub const END: u8 = 4;
    /// Go's `runtime.asmcgocall` where its C function returns: the
    /// caller's frame is on the goroutine's stack (stack.h says how).
    pub const GO_CGO: u8 = 5;
    /// A signal trampoline (glibc's `__restore_rt`, Go's
    /// `runtime.sigreturn__sigaction`): the interrupted frame's registers
    /// are in the ucontext at rsp (stack.h says where).
    pub const SIGNAL: u8 = 6;
}
/// `RIG_STACK_MAX_FRAMES`, `RIG_UNWIND_MAX_MAPS`, `RIG_UNWIND_MAX_PROCS` (stack.h).
pub const STACK_MAX_FRAMES: usize = 64;
pub const UNWIND_MAX_MAPS: usize = 1024;
/// `RIG_UNWIND_GROUP` (stack.h): mappings per searched group.
pub const UNWIND_GROUP: usize = 16;
pub const UNWIND_GROUPS: usize = UNWIND_MAX_MAPS / UNWIND_GROUP;
pub const UNWIND_MAX_PROCS: u32 = 64;

/// C twin: `struct unwind_row` (stack.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindRow {
    pub pc: u64,
    pub cfa_off: i32,
    pub rbp_off: i16,
    pub cfa: u8,
    /// Added to the return address read (stack.h says why).
    pub ra_adjust: u8,
}
const _: () = assert!(size_of::<UnwindRow>() == 16);

/// C twin: `struct unwind_map` (stack.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindMap {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub pc_base: u64,
    pub row_first: u32,
    pub row_count: u32,
    pub index_first: u32,
    pub buckets: u32,
}
const _: () = assert!(size_of::<UnwindMap>() == 48);
/// C twin: `struct unwind_bucket` (stack.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindBucket {
    pub lo: u32,
    pub hi: u32,
}
const _: () = assert!(size_of::<UnwindBucket>() == 8);
// SAFETY: repr(C), two u32, no padding.
unsafe impl aya::Pod for UnwindBucket {}

/// `RIG_UNWIND_BUCKET_SHIFT` (stack.h).
pub const UNWIND_BUCKET_SHIFT: u32 = 8;

/// C twin: `struct unwind_proc` (stack.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindProc {
    pub nmaps: u32,
    pub _pad: u32,
    /// The end of the last mapping of each group of [`UNWIND_GROUP`].
    pub group_end: [u64; UNWIND_GROUPS],
    pub maps: [UnwindMap; UNWIND_MAX_MAPS],
}
const _: () = assert!(size_of::<UnwindProc>() == 8 + 8 * UNWIND_GROUPS + 48 * UNWIND_MAX_MAPS);
impl Default for UnwindProc {
    fn default() -> Self {
        UnwindProc {
            nmaps: 0,
            _pad: 0,
            group_end: [0; UNWIND_GROUPS],
            maps: [UnwindMap::default(); UNWIND_MAX_MAPS],
        }
    }
}

impl UnwindProc {
    /// An address space of `maps` (sorted by start, at most
    /// [`UNWIND_MAX_MAPS`]), with the group ends the search reads.
    pub fn new(maps: &[UnwindMap]) -> UnwindProc {
        assert!(maps.len() <= UNWIND_MAX_MAPS, "{} mappings", maps.len());
        let mut p = UnwindProc {
            nmaps: maps.len() as u32,
            ..UnwindProc::default()
        };
        p.maps[..maps.len()].copy_from_slice(maps);
        for (g, chunk) in maps.chunks(UNWIND_GROUP).enumerate() {
            p.group_end[g] = chunk.last().map_or(0, |m| m.end);
        }
        p
    }
}

/// Bits of `UStack::flags` (stack.h `RIG_STACK_*`).
pub mod stack_flag {
    pub const TRUNCATED: u32 = 1 << 0;
    pub const NO_TABLE: u32 = 1 << 1;
    pub const NO_ROW: u32 = 1 << 2;
    pub const BAD_RULE: u32 = 1 << 3;
    pub const READ_FAIL: u32 = 1 << 4;
    pub const NO_PROC: u32 = 1 << 5;
    pub const NO_REGS: u32 = 1 << 6;
    pub const LOST_RETURN: u32 = 1 << 7;
    pub const INTERP_TRUNCATED: u32 = 1 << 8;
    pub const INTERP_READ_FAIL: u32 = 1 << 9;
    pub const INTERP_NO_THREAD: u32 = 1 << 10;
}

/// `RIG_STACK_MAX_IFRAMES` (stack.h): interpreted frames kept per stack.
pub const STACK_MAX_IFRAMES: usize = 32;

/// One word of `ustack.iframe` (stack.h): an interpreted frame.
pub mod iframe {
    /// The frame's code object.
    pub fn code(word: u64) -> u64 {
        word & 0xffff_ffff_fffe
    }

    /// Whether the interpreter entered the frame from C.
    pub fn entered(word: u64) -> bool {
        word & 1 != 0
    }

    /// The index of the instruction the frame runs, if it has run one.
    pub fn instruction(word: u64) -> Option<u32> {
        let i = (word >> 48) as u32;
        (i != 0xffff).then_some(i)
    }

    /// The word without its entry bit: what names the frame.
    pub fn named(word: u64) -> u64 {
        word & !1
    }
}

/// C twin: `struct ustack` (stack.h). Key: u64 stack id.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UStack {
    pub len: u32,
    pub flags: u32,
    pub ip: [u64; STACK_MAX_FRAMES],
    pub ilen: u32,
    pub _pad: u32,
    /// The interpreter's frames (code object address, bit 0: entered
    /// from C, bits 48-63: the instruction it runs, 0xffff for none),
    /// innermost first.
    pub iframe: [u64; STACK_MAX_IFRAMES],
}
const _: () = assert!(size_of::<UStack>() == 16 + 8 * STACK_MAX_FRAMES + 8 * STACK_MAX_IFRAMES);
impl Default for UStack {
    fn default() -> Self {
        UStack {
            len: 0,
            flags: 0,
            ip: [0; STACK_MAX_FRAMES],
            ilen: 0,
            _pad: 0,
            iframe: [0; STACK_MAX_IFRAMES],
        }
    }
}
impl UStack {
    /// The frames, innermost first.
    pub fn frames(&self) -> &[u64] {
        &self.ip[..(self.len as usize).min(STACK_MAX_FRAMES)]
    }

    /// The interpreted frames, innermost first.
    pub fn iframes(&self) -> &[u64] {
        &self.iframe[..(self.ilen as usize).min(STACK_MAX_IFRAMES)]
    }
}

/// C twin: `struct interp_proc` (stack.h). Key: tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterpProc {
    pub runtime: u64,
    pub current: u16,
    pub interp_head: u16,
    pub threads_head: u16,
    pub ts_next: u16,
    pub ts_thread: u16,
    pub ts_cframe: u16,
    pub cframe_frame: u16,
    pub frame_code: u16,
    pub frame_previous: u16,
    pub frame_entry: u16,
    pub frame_instr: u16,
    pub code_instr: u16,
    pub frame_span: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(size_of::<InterpProc>() == 40);

/// C twin: `enum stack_what` (stack.h).
pub mod stack_what {
    pub const ALLOC: u32 = 1;
    pub const COPY: u32 = 2;
    pub const LOCK: u32 = 3;
    pub const FUTEX_WAIT: u32 = 4;
    pub const SYSCALL: u32 = 5;
    pub const FAULT: u32 = 6;
    pub const OFFCPU: u32 = 7;
    pub const CPU: u32 = 8;
    pub const USER: u32 = 9;
}

/// C twin: `struct stack_key` (stack.h). Value: `StackVal`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    pub ustack: u64,
    pub tgid: u32,
    pub kstack: i32,
    pub what: u32,
    pub arg: u32,
}
const _: () = assert!(size_of::<StackKey>() == 24);

/// C twin: `struct stack_val` (stack.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackVal {
    pub count: u64,
    pub amount: u64,
}
const _: () = assert!(size_of::<StackVal>() == 16);

// SAFETY: all of these are repr(C), fixed-width integers only, no padding
// holes (sizes asserted above), valid for any bit pattern.
unsafe impl aya::Pod for UnwindRow {}
unsafe impl aya::Pod for UnwindMap {}
unsafe impl aya::Pod for UnwindProc {}
unsafe impl aya::Pod for UStack {}
unsafe impl aya::Pod for InterpProc {}
unsafe impl aya::Pod for StackKey {}
unsafe impl aya::Pod for StackVal {}

/// C twin: `struct cpu_key` (cpu.h). Value: u64 samples.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuKey {
    pub tgid: u32,
    pub in_kernel: u32,
}
const _: () = assert!(size_of::<CpuKey>() == 8);
// SAFETY: repr(C), two u32, no padding.
unsafe impl aya::Pod for CpuKey {}
