//! rig: what one request costs a server.
//!
//! Pipeline, one module per stage, plain data between stages:
//! `launch` (spec, start, pin, cgroup, ready, port-holder proof, maps) →
//! `load` (generators) → `probe` (eBPF + perf, windowed) and `sample`
//! (/proc + cgroup, by pid) → `symbolize` → `stats` → `report`.

pub mod ab;
pub mod case;
pub mod cli;
pub mod exit;
pub mod gate;
pub mod host;
pub mod launch;
#[cfg(test)]
mod layers;
pub mod load;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod report;
pub mod run;
pub mod sample;
pub mod scenario;
pub mod session;
pub mod stats;
pub mod symbolize;
pub mod window;
