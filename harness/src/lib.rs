//! rig: what one request costs a server.
//!
//! Pipeline, one module per stage, plain data between stages:
//! `target` (spec, launch, pin, cgroup, ready, port-holder proof, maps) →
//! `load` (generators) → `probe` (eBPF + perf, windowed) and `sample`
//! (/proc + cgroup, by pid) → `symbolize` → `stats` → `report`.

pub mod ab;
pub mod cli;
pub mod fsutil;
pub mod gate;
pub mod interrupt;
pub mod load;
pub mod probe;
pub mod report;
pub mod run;
pub mod sample;
pub mod scenario;
pub mod session;
pub mod stats;
pub mod symbolize;
pub mod target;
pub mod usage;
