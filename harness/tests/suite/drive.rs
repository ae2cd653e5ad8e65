//! `rig attach --drive` speaks what `rig run` speaks: HTTP/1.1 keep-alive
//! and a new connection per request, HTTP/1.0 servers that close, h2c, h2
//! and HTTP/1.1 over TLS (verified against a CA, or `--insecure`). Against
//! rig-peer and Debian's nginx; nginx's syscalls per request are exact
//! against the strace ground truth in fixtures/nginx/COSTS.md.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use rig::launch::{launch, Launched};
use rig::session::Child;

use super::{probes_shared, repo, rig_bin};
use rig::exit;

const N: u64 = 400;

fn tls(name: &str) -> String {
    repo().join("fixtures/tls").join(name).display().to_string()
}

/// `rig attach --pid PID --probes syscalls --json F ARGS`: exit code,
/// stderr and the attribution.
fn attach(pid: u32, args: &[&str]) -> (i32, String, Option<Value>) {
    let json = std::env::temp_dir().join(format!(
        "rig-drive-{}-{}.json",
        std::process::id(),
        rand_suffix()
    ));
    let out = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "syscalls"])
        .args(["--requests", &N.to_string(), "--connections", "1"])
        .args(["--json", json.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let a = std::fs::read(&json)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap());
    let _ = std::fs::remove_file(&json);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        a,
    )
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Attach with `args`; every request succeeded and nothing was lost.
fn measured(pid: u32, args: &[&str]) -> Value {
    let (code, err, a) = attach(pid, args);
    assert_eq!(code, exit::OK, "{args:?}: {err}");
    let a = a.unwrap();
    assert_eq!(a["window"]["requests"], N, "{args:?}");
    assert_eq!(a["window"]["load"]["succeeded"], N, "{args:?}");
    assert_eq!(a["complete"], true, "{args:?}");
    a
}

/// Syscalls per request, by name (only those seen).
fn per_request(a: &Value) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["count"].as_u64().unwrap() as f64 / N as f64,
            )
        })
        .collect();
    v.sort_by(|x, y| x.0.cmp(&y.0));
    v
}

fn calls(a: &Value, name: &str) -> f64 {
    per_request(a)
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(0.0, |(_, c)| c)
}

fn drive_says(a: &Value) -> String {
    a["window"]["drive"].as_str().unwrap().to_string()
}

fn peer(args: &[&str]) -> Child {
    let bin = rig::launch::spec::rig_peer().unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["--port", "0", "--workers", "1"]).args(args);
    Child::spawn_ready(cmd).unwrap()
}

#[test]
fn drive_speaks_every_protocol_to_rig_peer() {
    root_or_skip!();
    let _g = probes_shared();
    let clear = peer(&[]);
    let url = format!("http://127.0.0.1:{}/plain", clear.port);
    let a = measured(clear.pid(), &["--drive", &url]);
    assert!(
        drive_says(&a)
            .starts_with("HTTP/1.1 keep-alive, 1 connection; handshakes inside the window: 0 TCP"),
        "{}",
        drive_says(&a)
    );
    // hyper answers each request with one writev after one read.
    assert_eq!((calls(&a, "recvfrom"), calls(&a, "writev")), (1.0, 1.0));
    let a = measured(clear.pid(), &["--drive", &url, "--new-connection"]);
    assert!(
        drive_says(&a).contains(&format!(
            "a new connection per request, 1 at a time; handshakes inside the window: {N} TCP"
        )),
        "{}",
        drive_says(&a)
    );
    // Every connection is closed exactly once by the server.
    assert_eq!(calls(&a, "close"), 1.0, "{:?}", per_request(&a));
    let a = measured(clear.pid(), &["--drive", &url, "--protocol", "h2c"]);
    assert!(
        drive_says(&a).starts_with("h2c, 1 connection × 1 stream;"),
        "{}",
        drive_says(&a)
    );
    assert_eq!(calls(&a, "writev"), 1.0, "{:?}", per_request(&a));

    let secure = peer(&[
        "--tls",
        "--cert",
        &tls("localhost.pem"),
        "--key",
        &tls("localhost.key"),
    ]);
    let url = format!("https://127.0.0.1:{}/plain", secure.port);
    let ca = tls("ca.pem");
    for proto in ["h2", "h1"] {
        let a = measured(
            secure.pid(),
            &[
                "--drive",
                &url,
                "--protocol",
                proto,
                "--ca",
                &ca,
                "--server-name",
                "localhost",
            ],
        );
        assert!(
            drive_says(&a).contains(&format!("(server name localhost, verified against {ca})")),
            "{}",
            drive_says(&a)
        );
        assert!(
            calls(&a, "writev") + calls(&a, "write") >= 1.0,
            "{:?}",
            per_request(&a)
        );
    }

    // A plain self-signed certificate is its own CA: refused even with
    // itself as the CA, with the way out named; --insecure accepts it and
    // the report says the certificate was not verified.
    let selfsigned = peer(&[
        "--tls",
        "--cert",
        &tls("selfsigned.pem"),
        "--key",
        &tls("selfsigned.key"),
    ]);
    let url = format!("https://127.0.0.1:{}/plain", selfsigned.port);
    let (code, err, _) = attach(
        selfsigned.pid(),
        &[
            "--drive",
            &url,
            "--ca",
            &tls("selfsigned.pem"),
            "--server-name",
            "localhost",
        ],
    );
    assert_eq!(code, exit::ERROR, "{err}");
    assert!(
        err.contains("CaUsedAsEndEntity") && err.contains("give --insecure"),
        "{err}"
    );
    let a = measured(
        selfsigned.pid(),
        &["--drive", &url, "--insecure", "--server-name", "localhost"],
    );
    assert!(
        drive_says(&a).starts_with(
            "h2 over TLS (server name localhost; certificate NOT verified (--insecure)), 1 connection × 1 stream;"
        ),
        "{}",
        drive_says(&a)
    );
}

#[test]
fn drive_reconnects_to_an_http_1_0_server_that_closes_and_says_so() {
    root_or_skip!();
    let _g = probes_shared();
    // python3's http.server answers HTTP/1.0 and closes every connection.
    let dir = tempdir("py");
    std::fs::write(dir.join("hello.txt"), "hello\n").unwrap();
    let mut cmd = Command::new("python3");
    cmd.args(["-u", "-c", PY_SERVER]).current_dir(&dir);
    let server = Child::spawn_ready(cmd).unwrap();
    let url = format!("http://127.0.0.1:{}/hello.txt", server.port);
    let a = measured(server.pid(), &["--drive", &url]);
    assert!(
        drive_says(&a).contains(&format!(
            "handshakes inside the window: {N} TCP, 0 TLS, 0 h2; the server closed the connection {N} times"
        )),
        "{}",
        drive_says(&a)
    );
    assert_eq!(calls(&a, "accept4"), 1.0, "{:?}", per_request(&a));
    let _ = std::fs::remove_dir_all(&dir);
}

/// nginx with `keepalive_timeout 0` answers `Connection: close` and closes
/// every connection, as an HTTP/1.0 server does: the keep-alive client
/// reconnects for each request, says so, and the worker's syscalls per
/// request are exactly those of fixtures/nginx/COSTS.md ("Per protocol",
/// the closing server).
#[test]
fn drive_reconnects_to_nginx_closing_every_connection_with_its_exact_syscalls() {
    root_or_skip!();
    let _g = probes_shared();
    let Some(closing) = nginx("nginx-close.toml") else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/plain", closing.port);
    let a = measured(closing.pid, &["--drive", &url]);
    assert!(
        drive_says(&a).starts_with(&format!(
            "HTTP/1.1 keep-alive, 1 connection; handshakes inside the window: {N} TCP, 0 TLS, 0 h2; \
             the server closed the connection {N} times"
        )),
        "{}",
        drive_says(&a)
    );
    let want: Vec<(String, f64)> = [
        ("accept4", 1.0),
        ("close", 1.0),
        ("epoll_ctl", 1.0),
        ("epoll_wait", 2.0),
        ("recvfrom", 1.0),
        ("writev", 1.0),
    ]
    .iter()
    .map(|(n, c)| (n.to_string(), *c))
    .collect();
    assert_eq!(per_request(&a), want, "{}", drive_says(&a));
    closing.stop(Duration::from_secs(2));
}

/// http.server on an ephemeral loopback port, saying `READY port=N`.
const PY_SERVER: &str = "
import http.server, socketserver
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
print('READY port=%d' % s.server_address[1], flush=True)
s.serve_forever()
";

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rig-drive-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn nginx(spec: &str) -> Option<Launched> {
    super::required(
        spec,
        "/usr/sbin/nginx",
        super::file("/usr/sbin/nginx"),
        "scripts/deps.sh installs Debian's nginx",
    )?;
    let spec = TargetSpec::load(repo().join("config/targets").join(spec)).unwrap();
    let opts = LaunchOptions {
        label: "drive".into(),
        ..LaunchOptions::default()
    };
    Some(launch(&spec, &opts).unwrap_or_else(|e| panic!("{e}")))
}

/// nginx's worker, per request, for each protocol (fixtures/nginx/COSTS.md,
/// "Per protocol": strace differences of two runs of independent clients).
#[test]
fn drive_counts_nginx_syscalls_exactly_for_every_protocol() {
    root_or_skip!();
    let _g = probes_shared();
    let Some(plain) = nginx("nginx.toml") else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/plain", plain.port);
    let exact = |a: &Value, want: &[(&str, f64)]| {
        let got = per_request(a);
        let want: Vec<(String, f64)> = want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        assert_eq!(got, want, "{}", drive_says(a));
    };
    let a = measured(plain.pid, &["--drive", &url]);
    exact(
        &a,
        &[("epoll_wait", 1.0), ("recvfrom", 1.0), ("writev", 1.0)],
    );
    let a = measured(plain.pid, &["--drive", &url, "--new-connection"]);
    for (name, want) in [
        ("accept4", 1.0),
        ("close", 1.0),
        ("epoll_ctl", 1.0),
        ("writev", 1.0),
    ] {
        assert_eq!(calls(&a, name), want, "{name}: {:?}", per_request(&a));
    }
    plain.stop(Duration::from_secs(2));

    let Some(h2c) = nginx("nginx-h2c.toml") else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/plain", h2c.port);
    let a = measured(h2c.pid, &["--drive", &url, "--protocol", "h2c"]);
    exact(
        &a,
        &[("epoll_wait", 1.0), ("recvfrom", 1.0), ("writev", 2.0)],
    );
    h2c.stop(Duration::from_secs(2));

    let Some(tls_ng) = nginx("nginx-tls.toml") else {
        return;
    };
    let url = format!("https://127.0.0.1:{}/plain", tls_ng.port);
    let ca = tls("ca.pem");
    for proto in ["h2", "h1"] {
        let a = measured(
            tls_ng.pid,
            &[
                "--drive",
                &url,
                "--protocol",
                proto,
                "--ca",
                &ca,
                "--server-name",
                "localhost",
            ],
        );
        exact(&a, &[("epoll_wait", 1.0), ("read", 2.0), ("write", 1.0)]);
    }
    tls_ng.stop(Duration::from_secs(2));

    let Some(selfsigned) = nginx("nginx-selfsigned.toml") else {
        return;
    };
    let url = format!("https://127.0.0.1:{}/plain", selfsigned.port);
    let a = measured(
        selfsigned.pid,
        &["--drive", &url, "--insecure", "--server-name", "localhost"],
    );
    exact(&a, &[("epoll_wait", 1.0), ("read", 2.0), ("write", 1.0)]);
    assert!(drive_says(&a).contains("certificate NOT verified (--insecure)"));
    selfsigned.stop(Duration::from_secs(2));
}
