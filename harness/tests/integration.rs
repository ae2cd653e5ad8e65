//! Integration tests: real probes on real processes (root; see suite/mod.rs
//! for the skip rule).
mod suite;
