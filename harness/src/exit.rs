//! Exit codes of the `rig` binary, one place for the binary, the docs and
//! the tests.

pub const OK: i32 = 0;
/// Any other failure.
pub const ERROR: i32 = 1;
/// Bad flags (clap's own code).
pub const USAGE: i32 = 2;
/// Not permitted: not root, or the pid cannot be traced.
pub const PERMISSION: i32 = 3;
/// No such process.
pub const NO_PROCESS: i32 = 4;
/// The window lost events (the report says which).
pub const INCOMPLETE: i32 = 5;
/// `rig run`: at least one case failed (the report says why). `rig
/// attach`: the window failed, its target exited during it (what was
/// counted until then is still printed and written).
pub const CASE_FAILED: i32 = 6;
/// `rig gate`: a counter breached its baseline limit.
pub const GATE_BREACH: i32 = 7;
/// `rig bisect`: stopped at a commit like neither end (ambiguous), so no
/// first commit was found; the interval it had is printed.
pub const UNDECIDED: i32 = 8;
/// Interrupted by SIGINT/SIGTERM; partial results were written.
pub const INTERRUPTED: i32 = 130;
