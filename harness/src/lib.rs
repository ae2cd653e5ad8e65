//! rig: what one request costs a server.
//!
//! Layers, imports pointing down only (checked by `layers.rs`; drawn in
//! docs/architecture.md):
//! - `cli`: flags into settings, settings into a command; `exit` codes.
//! - commands: `session` (the attach window), `run`, `ab`, `gate`,
//!   `flamegraph` (`rig flame`, the flamegraphs of output directories),
//!   `commands` (attach and demo output, instructions, probe-cost,
//!   check-config, report), `compare` (result directories over builds)
//!   and `bisect` (the commit where a counter moved).
//! - `case`: one case on fresh servers (clean, counted, memory passes).
//! - `window`: the fixed-count window, once (warm-up, counters, N requests).
//! - `report` (attribution, tables, output directory) and `metrics`
//!   (per-request values, counter names, case keys); `html` (report.html
//!   of an output directory).
//! - stages, plain data between them: `launch` (spec, start, pin, cgroup,
//!   port-holder proof, arm identity), `load` (generators), `sample` (/proc
//!   and cgroup, by pid), `probe` (eBPF, perf counter, callgrind control).
//! - leaves: `process` (pids, tree, maps), `symbolize`, `scenario`,
//!   `stats`, `host`, `funchash` (function hashes of two builds),
//!   `gitfacts` (the commit a file was built from).

pub mod ab;
pub mod bisect;
pub mod case;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod console;
pub mod elf;
pub mod exit;
pub mod flamegraph;
pub mod fsutil;
pub mod funchash;
pub mod gate;
pub mod gitfacts;
pub mod host;
pub mod html;
pub mod interrupt;
pub mod launch;
#[cfg(test)]
mod layers;
pub mod load;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod report;
pub mod results;
pub mod run;
pub mod runtime;
pub mod sample;
pub mod scenario;
pub mod session;
pub mod stats;
pub mod symbolize;
#[cfg(test)]
mod testkit;
pub mod usage;
pub mod window;
