//! One test binary for rig-peer: every test starts the real binary.
mod suite;
