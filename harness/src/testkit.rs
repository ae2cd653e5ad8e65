//! Helpers the unit tests of several modules share.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Inputs per property (as tests/suite/fuzz.rs).
pub const CASES: u32 = 256;

/// Run `test` on `CASES` inputs drawn from `strategy`; a panic fails with
/// the (shrunk) input. Says how many inputs it tried.
pub fn fuzz<S: proptest::strategy::Strategy>(name: &str, strategy: S, test: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    let config = proptest::test_runner::Config {
        cases: CASES,
        failure_persistence: None,
        ..Default::default()
    };
    let tried = AtomicU32::new(0);
    proptest::test_runner::TestRunner::new(config)
        .run(&strategy, |v| {
            tried.fetch_add(1, Ordering::Relaxed);
            test(v);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    crate::errln!(
        "fuzz: {name}: {} inputs, 0 panics",
        tried.load(Ordering::Relaxed)
    );
}

/// `git ARGS` in `repo` as a fixed committer; panics unless it succeeds,
/// and gives its trimmed standard output.
pub fn git(repo: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}
