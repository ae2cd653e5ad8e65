//! `rig check-config`: one config file validated, its errors printed.

use std::path::Path;

use anyhow::{Context, Result};

use crate::exit;

/// A matrix (it has `[[suite]]`) or a target spec: exit 0 when valid, 2
/// (a bad config value, as `rig run` refuses it) with every error printed
/// when not. A matrix is also counted: the cases it expands to, refused
/// above what one run takes.
pub fn command(path: &Path) -> Result<i32> {
    let text =
        crate::fsutil::read_config(path).with_context(|| format!("reading {}", path.display()))?;
    // A matrix has suites or defaults; a target spec has neither.
    if text.contains("[[suite]]") || text.contains("[defaults]") {
        let counted =
            crate::scenario::Matrix::parse(&path.display().to_string(), &text).and_then(|m| {
                let repeats = m.defaults.repeats.max(1);
                let n = m.case_count(&[], 1, repeats)?;
                Ok((m, n))
            });
        match counted {
            Ok((m, n)) => {
                crate::outln!(
                    "{}: a valid matrix with {} suites, {n} cases per target",
                    path.display(),
                    m.suites.len()
                );
                Ok(exit::OK)
            }
            Err(e @ crate::scenario::MatrixError::TooManyCases(_)) => {
                crate::errln!("{}: {e}", path.display());
                Ok(exit::USAGE)
            }
            Err(e) => {
                crate::errln!("{e}");
                Ok(exit::USAGE)
            }
        }
    } else {
        match crate::launch::spec::check_config(path) {
            Ok(summary) => {
                crate::outln!("{summary}");
                Ok(exit::OK)
            }
            Err(errors) => {
                for e in &errors {
                    crate::errln!("{e}");
                }
                Ok(exit::USAGE)
            }
        }
    }
}
