//! The default target: Debian's nginx, one worker, plain h1, h2c and h2
//! over TLS on loopback ports, in a directory removed on drop.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rig::load::Expect;

use crate::tools::pin;
use crate::Target;

pub struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT: graceful shutdown of master and worker.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A throwaway CA (`ca.pem`) and a localhost certificate (`cert.pem`,
/// `key.pem`) in `dir`, for the TLS listener.
fn write_tls(dir: &Path) -> Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "rig loadbench CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["localhost".into()])?.signed_by(&key, &ca, &ca_key)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("cert.pem"), leaf.pem())?;
    std::fs::write(dir.join("key.pem"), key.serialize_pem())?;
    Ok(())
}

/// nginx started on three free loopback ports, pinned to `cpu`, listening.
pub fn start(cpu: usize) -> Result<Target> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("nginx not found (apt-get install -y nginx-light), or give --url")?;
    let dir = std::env::temp_dir().join(format!("rig-loadbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    write_tls(&dir)?;
    let (p1, p2, p3) = (free_port()?, free_port()?, free_port()?);
    let d = dir.display();
    let conf = format!(
        r#"worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{p1};
        listen 127.0.0.1:{p2} http2;
        listen 127.0.0.1:{p3} ssl http2;
        server_name localhost;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        location = /plain {{
            default_type text/plain;
            return 200 "Hello, World!";
        }}
    }}
}}
"#
    );
    std::fs::write(dir.join("nginx.conf"), conf)?;
    let mut cmd = Command::new(nginx);
    cmd.args(["-p", &d.to_string(), "-c", &format!("{d}/nginx.conf"), "-e"])
        .arg(format!("{d}/error.log"))
        .stdin(Stdio::null());
    pin(&mut cmd, cpu);
    let child = cmd.spawn().context("starting nginx")?;
    let guard = Nginx {
        child,
        dir: dir.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    for p in [p1, p2, p3] {
        while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                bail!("nginx did not listen on {p}: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let a = |p: u16| Some(SocketAddr::from(([127, 0, 0, 1], p)));
    Ok(Target {
        h1: a(p1),
        h2c: a(p2),
        h2tls: a(p3),
        path: "/plain".into(),
        expect: Expect::ok_exact(Some("text/plain"), "Hello, World!"),
        ca: Some(dir.join("ca.pem")),
        _nginx: Some(guard),
        h3: None,
    })
}
