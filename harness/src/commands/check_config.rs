//! `rig check-config`: one config file validated, its errors printed.

use std::path::Path;

use anyhow::{Context, Result};

use crate::exit;

/// A matrix (it has `[[suite]]`) or a target spec: exit 0 when valid, 1
/// with every error printed when not.
pub fn command(path: &Path) -> Result<i32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A matrix has suites or defaults; a target spec has neither.
    if text.contains("[[suite]]") || text.contains("[defaults]") {
        match crate::scenario::Matrix::load(path) {
            Ok(m) => {
                println!(
                    "{}: a valid matrix with {} suites",
                    path.display(),
                    m.suites.len()
                );
                Ok(exit::OK)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(exit::ERROR)
            }
        }
    } else {
        match crate::launch::spec::check_config(path) {
            Ok(summary) => {
                println!("{summary}");
                Ok(exit::OK)
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                Ok(exit::ERROR)
            }
        }
    }
}
