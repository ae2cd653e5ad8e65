//! The process under test: its spec, launch, pid validation and memory map.
//!
//! In: a target spec (`spec`, TOML) or a pid. Out: a `start::Launched`
//! target (own process group, pinned, in its own cgroup, ready, port holder
//! proven, mapped objects hashed) and `ProcMaps` (what is mapped where, with
//! build-ids), used by the probe stage to find libraries and by the
//! symbolizer to turn absolute addresses into module offsets.

pub mod cgroup;
pub mod cgroup_stats;
mod child;
mod facts;
pub mod identity;
mod launched;
mod output;
pub mod port;
mod ready;
mod sockdiag;
pub mod spec;
pub mod start;
pub mod user;
pub mod watchdog;

pub use crate::process::{cmdline, maps, ProcessId};
pub use cgroup::{reap_stale_cgroups, CgroupHandle};
pub use child::die_with_rig;
pub use port::{descendants, port_holders};
pub use spec::{check_config, ConfigError, SpecError, TargetSpec};
pub use start::{cleanup_all, launch, ExitInfo, LaunchError, LaunchOptions, Launched};
