//! A validated spec turned into what a launch runs: the command line with
//! its placeholders resolved, and the rendered `[[files]]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

impl TargetSpec {
    /// Resolve placeholders and paths for a launch on `port` whose files
    /// live in `run_dir` (a spec that uses `{run_dir}` needs one).
    pub fn command(&self, port: u16, run_dir: Option<&Path>) -> Result<ResolvedCommand, SpecError> {
        let sub = |s: &str| self.substitute(s, port, run_dir);
        let mut argv = self
            .argv
            .iter()
            .map(|a| sub(a))
            .collect::<Result<Vec<_>, _>>()?;
        if argv.is_empty() {
            return Err(SpecError::Invalid(vec![]));
        }
        let prog = argv.remove(0);
        // A bare name is looked up in PATH by the spawn; a name with a slash
        // is a path, relative to the spec's directory.
        let program = if prog.contains('/') {
            under(&self.dir, &prog)
        } else {
            PathBuf::from(prog)
        };
        let mut env = BTreeMap::new();
        for (k, v) in &self.env {
            env.insert(k.clone(), sub(v)?);
        }
        if let PortPassing::Env(var) = &self.port {
            env.insert(var.clone(), port.to_string());
        }
        let cwd = match &self.cwd {
            Some(c) => under(&self.dir, &sub(c)?),
            None => self.dir.clone(),
        };
        Ok(ResolvedCommand {
            program,
            args: argv,
            env,
            cwd,
        })
    }

    /// The command as it would launch, for looking at its program and
    /// library environment without launching (port 0; `{run_dir}` stays a
    /// literal).
    pub fn inspect_command(&self) -> Result<ResolvedCommand, SpecError> {
        self.command(0, Some(Path::new("{run_dir}")))
    }

    /// Render every `[[files]]` template into `run_dir`.
    pub fn render_files(&self, port: u16, run_dir: &Path) -> Result<(), SpecError> {
        for f in &self.files {
            let io = |e: std::io::Error, what: &str| SpecError::Placeholder {
                path: self.path.clone(),
                placeholder: "run_dir".into(),
                why: format!("{what} {}: {e}", f.template.display()),
            };
            let text = std::fs::read_to_string(&f.template).map_err(|e| io(e, "reading"))?;
            let out = self.substitute(&text, port, Some(run_dir))?;
            // run_dir is private to rig; still, never follow a link or
            // overwrite a file there (see fsutil).
            let dest = run_dir.join(&f.path);
            if let Some(parent) = Path::new(&f.path).parent() {
                crate::fsutil::make_dirs_below(run_dir, parent)
                    .map_err(|e| io(e, "making the directory for"))?;
            }
            crate::fsutil::write_new(&dest, out.as_bytes())
                .map_err(|e| io(e, "writing the rendering of"))?;
        }
        Ok(())
    }

    fn substitute(&self, s: &str, port: u16, run_dir: Option<&Path>) -> Result<String, SpecError> {
        let mut out = String::new();
        let mut last = 0;
        for (off, ph) in placeholders(s) {
            out.push_str(&s[last..off]);
            let value = match ph {
                "port" => port.to_string(),
                "spec_dir" => self.dir.display().to_string(),
                "run_dir" => match run_dir {
                    Some(d) => d.display().to_string(),
                    None => {
                        return Err(SpecError::Placeholder {
                            path: self.path.clone(),
                            placeholder: ph.into(),
                            why: "only a launch has a run directory".into(),
                        })
                    }
                },
                "calib_server" => rig_fixtures::calib_server().display().to_string(),
                ab if fixture_placeholder(ab).is_some() => {
                    fixture_placeholder(ab).unwrap().display().to_string()
                }
                "rig_peer" => rig_peer()
                    .map_err(|why| SpecError::Placeholder {
                        path: self.path.clone(),
                        placeholder: ph.into(),
                        why,
                    })?
                    .display()
                    .to_string(),
                other => {
                    return Err(SpecError::Placeholder {
                        path: self.path.clone(),
                        placeholder: other.into(),
                        why: format!("unknown; known: {}", PLACEHOLDERS.join(", ")),
                    })
                }
            };
            out.push_str(&value);
            last = off + ph.len() + 2;
        }
        out.push_str(&s[last..]);
        Ok(out)
    }
}
