//! The README and the tests cannot drift.

use super::repo;

/// The README's "Failure behaviour" tables and the tests cannot drift:
/// every test a row names exists (`file::test` of this suite, or
/// `module::tests::test` of the library), and every signal test is a row.
#[test]
fn the_readme_failure_tables_name_only_tests_that_exist_and_every_signal_test() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## Failure behaviour\n")
        .nth(1)
        .expect("README has a Failure behaviour section");
    let section = section.split("\n## ").next().unwrap();
    // A row's last cell (its test column) lies between its last two `|`.
    let named: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_end().strip_suffix('|')?.rsplit('|').next())
        .filter(|cell| cell.contains("::"))
        .flat_map(|cell| cell.split(','))
        .map(str::trim)
        .collect();
    let mut missing = Vec::new();
    for path in &named {
        let parts: Vec<&str> = path.split("::").collect();
        let (name, modules) = parts.split_last().unwrap();
        let modules: Vec<&str> = modules.iter().copied().filter(|m| *m != "tests").collect();
        let dir = modules.join("/");
        let src = repo().join("harness/src");
        let candidates = [
            repo().join(format!("harness/tests/suite/{dir}.rs")),
            src.join(format!("{dir}/tests.rs")),
            // A module's tests in a file beside it (`gopclntab_tests.rs`).
            src.join(format!("{dir}_tests.rs")),
            src.join(format!("{dir}.rs")),
            src.join(format!("{dir}/mod.rs")),
        ];
        let found = candidates
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(&format!("fn {name}()"))));
        if !found {
            missing.push(*path);
        }
    }
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "README rows name tests that do not exist"
    );
    // Every signal test is a row: the table is where a user reads what each
    // signal does to each command.
    let signals = std::fs::read_to_string(repo().join("harness/tests/suite/signals.rs")).unwrap();
    let unlisted: Vec<&str> = signals
        .split("#[test]\nfn ")
        .skip(1)
        .filter_map(|t| t.split('(').next())
        .filter(|name| !named.contains(&format!("signals::{name}").as_str()))
        .collect();
    assert_eq!(
        unlisted,
        Vec::<&str>::new(),
        "signal tests with no README row"
    );
}
