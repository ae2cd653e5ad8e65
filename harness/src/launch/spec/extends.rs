//! `extends`: a spec written as another spec plus changes, merged before it
//! is parsed, and the errors of the merged text put back on the lines of
//! the file that was written.

use std::path::Path;

use super::*;

/// `extends = "base.toml"`: this spec is the base with this file's
/// top-level keys put over it (`env` merged key by key; `[protocols]` and
/// `[[endpoints]]` replaced whole when given). An A/B arm is typically its
/// base plus one env change (`LD_LIBRARY_PATH`, `LD_PRELOAD`) or another
/// `argv`. The merged spec is then parsed as if it were this file, so its
/// relative paths resolve against this file's directory.
pub(super) fn resolve(path: &Path, text: &str, depth: usize) -> Result<String, SpecError> {
    let mut table: toml::Table = match toml::from_str(text) {
        Ok(t) => t,
        Err(_) => return Ok(text.to_string()), // parse() reports it with its line
    };
    let Some(base) = table.remove("extends") else {
        return Ok(text.to_string());
    };
    let invalid = |message: String| {
        SpecError::Invalid(vec![ConfigError {
            path: path.to_path_buf(),
            line: 1,
            col: 1,
            message,
            source_line: String::new(),
            warning: false,
        }])
    };
    let base = base.as_str().ok_or_else(|| {
        invalid(
            "`extends` must be a string: the path of the base spec, relative to this spec's \
             directory or absolute, e.g. extends = \"calib.toml\""
                .into(),
        )
    })?;
    if depth > 8 {
        return Err(invalid(format!(
            "`extends = {base:?}`: more than 8 levels (a cycle?)"
        )));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let base_path = under(dir, base);
    let base_text = crate::fsutil::read_config(&base_path).map_err(|source| SpecError::Read {
        path: base_path.clone(),
        source,
    })?;
    let base_text = resolve(&base_path, &base_text, depth + 1)?;
    let mut merged: toml::Table = toml::from_str(&base_text).map_err(|e| {
        invalid(format!(
            "extended spec {}: {}",
            base_path.display(),
            e.message()
        ))
    })?;
    for (k, v) in table {
        match (k.as_str(), merged.get_mut("env"), v) {
            ("env", Some(toml::Value::Table(base_env)), toml::Value::Table(env)) => {
                base_env.extend(env);
            }
            (_, _, v) => {
                merged.insert(k, v);
            }
        }
    }
    toml::to_string(&merged).map_err(|e| invalid(format!("merging {}: {e}", base_path.display())))
}

/// An error found in the merged text of an extending spec, put back where
/// its key is written: on its line in the extending file when that file
/// sets the key, else said to come from the spec it extends (the merged
/// text is rig's own re-serialization, so its line numbers are nobody's).
pub(super) fn relocate(mut d: ConfigError, own_text: &str) -> ConfigError {
    let key = d
        .source_line
        .split('=')
        .next()
        .map(|k| {
            k.trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
        })
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    let own = key.as_deref().and_then(|k| {
        own_text.lines().enumerate().find_map(|(i, l)| {
            let t = l.trim_start();
            let rest = t.strip_prefix(k)?;
            let rest = rest.trim_start();
            (rest.starts_with('=') || rest.starts_with(']'))
                .then(|| (i + 1, l.len() - t.len() + 1, l.to_string()))
        })
    });
    match own {
        Some((line, col, src)) => {
            d.line = line;
            d.col = col;
            d.source_line = src;
        }
        None => {
            d.line = 1;
            d.col = 1;
            d.message = format!(
                "{} (from the spec this one extends: this file does not set it)",
                d.message
            );
            d.source_line = own_text
                .lines()
                .find(|l| l.trim_start().starts_with("extends"))
                .unwrap_or_default()
                .to_string();
        }
    }
    d
}
