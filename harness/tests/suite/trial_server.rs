//! The trial server (`fixtures/trial/trial_server.c`, one way of
//! misbehaving per flag) as tests run it: its specs and matrices, rig runs
//! against it, audited afterwards ([`super::audit::audit`]).

use super::audit::{run_audited, TAG_VAR};
use super::rig_bin;
use super::scratch::{finish, Scratch};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A trial server spec: `trial_server --port {port} FLAGS`, tagged with
/// `tag` for the audit, its one endpoint `/` answering `trial\n`.
pub(super) fn trial_spec(s: &Scratch, file: &str, flags: &[&str], tag: &str) -> PathBuf {
    spec_with(s, file, rig_fixtures::trial_server(), flags, tag)
}

pub(super) fn spec_with(
    s: &Scratch,
    file: &str,
    program: &Path,
    flags: &[&str],
    tag: &str,
) -> PathBuf {
    let argv: Vec<String> = [
        program.display().to_string(),
        "--port".into(),
        "{port}".into(),
    ]
    .into_iter()
    .chain(flags.iter().map(|f| f.to_string()))
    .map(|a| toml::Value::String(a).to_string())
    .collect();
    s.write(
        file,
        &format!(
            "name = \"trial\"\nargv = [{}]\nport = \"argv\"\nenv = {{ {TAG_VAR} = \"{tag}\" }}\n\
             ready = {{ stdout = \"READY\" }}\nready_timeout_ms = 10000\n[protocols]\nh1 = true\n\
             [[endpoints]]\npath = \"/\"\nstatus = 200\ncontent_type = \"text/plain\"\n\
             body = {{ literal = \"trial\\n\" }}\n",
            argv.join(", ")
        ),
    )
}

/// A one-suite matrix on `/`: `settings` go into `[defaults]`, `suite`
/// into the suite (e.g. `rates = [100]`).
pub(super) fn matrix(s: &Scratch, file: &str, settings: &str, suite: &str) -> PathBuf {
    // A key given replaces its default line.
    let lines = |defaults: &str, given: &str| {
        let keys: Vec<&str> = given
            .lines()
            .filter_map(|l| Some(l.split_once('=')?.0.trim()))
            .collect();
        defaults
            .lines()
            .filter(|l| {
                !l.split_once('=')
                    .is_some_and(|(k, _)| keys.contains(&k.trim()))
            })
            .chain(given.lines())
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    s.write(
        file,
        &format!(
            "[defaults]\n{}[[suite]]\n{}",
            lines(
                "warmup_ms = 100\nduration_ms = 400\ncounted_requests = 200",
                settings
            ),
            lines(
                "name = \"t\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\ntopologies = [\"2\"]",
                suite
            ),
        ),
    )
}

/// What one audited `rig run` did.
pub(super) struct Ran {
    pub(super) code: i32,
    pub(super) out: String,
    pub(super) err: String,
    pub(super) cases: Vec<Value>,
}

/// `rig run --target T… --matrix M --out <scratch>/NAME ARGS…`, audited.
pub(super) fn trial_run(
    s: &Scratch,
    name: &str,
    targets: &[&Path],
    m: &Path,
    args: &[&str],
    tag: &str,
) -> Ran {
    let out = s.0.join(name);
    let mut cmd = Command::new(rig_bin());
    cmd.arg("run");
    for t in targets {
        cmd.arg("--target").arg(t);
    }
    cmd.arg("--matrix").arg(m).arg("--out").arg(&out).args(args);
    let (code, stdout, stderr) = run_audited(name, tag, &out, &mut cmd);
    let cases = std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Ran {
        code,
        out: stdout,
        err: stderr,
        cases,
    }
}

/// A trial server started by the test itself (for `rig attach`), killed
/// when dropped.
pub(super) struct Server {
    pub(super) child: std::process::Child,
    pub(super) port: u16,
}

/// `rig attach --pid P --probes syscalls ARGS… --json J`: exit, stderr,
/// and the JSON when it was written.
pub(super) fn attach(
    s: &Scratch,
    name: &str,
    pid: u32,
    args: &[&str],
) -> (i32, String, Option<Value>) {
    attach_probes(s, name, pid, "syscalls", args)
}

/// [`attach`] with the families `probes`.
pub(super) fn attach_probes(
    s: &Scratch,
    name: &str,
    pid: u32,
    probes: &str,
    args: &[&str],
) -> (i32, String, Option<Value>) {
    let json = s.0.join(format!("{name}.json"));
    let child = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", probes])
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, out, err) = finish(child);
    let a = std::fs::read(&json)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap());
    (code, format!("{out}\n{err}"), a)
}

/// Calls of syscall `name` in an attach JSON.
pub(super) fn syscalls(a: &Value, name: &str) -> i64 {
    a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["count"].as_i64())
        .unwrap_or(0)
}

pub(super) fn tag(name: &str) -> String {
    format!("trial-{name}-{}", std::process::id())
}

impl Ran {
    pub(super) fn text(&self) -> String {
        format!("exit {}\n{}\n{}", self.code, self.out, self.err)
    }
}

impl Server {
    pub(super) fn start(flags: &[&str]) -> Server {
        Server::start_program(rig_fixtures::trial_server(), flags)
    }

    /// `program --port 0 FLAGS…`, which prints `READY port=N`.
    pub(super) fn start_program(program: &Path, flags: &[&str]) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(program)
            .args(["--port", "0"])
            .args(flags)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.next().unwrap().unwrap();
        let port = line
            .strip_prefix("READY port=")
            .and_then(|p| p.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no READY line: {line}"));
        std::thread::spawn(move || for _ in lines {});
        Server { child, port }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
