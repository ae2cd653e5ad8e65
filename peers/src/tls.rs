//! PEM files in, a rustls `ServerConfig` (ALPN h2 then http/1.1) out.
//!
//! The crypto provider is `ring`, passed explicitly (no process-wide
//! default). rustls' default, aws-lc-rs, does build here without cmake or
//! nasm (aws-lc-sys 0.47 compiles with `cc`), but it is the heavier build for
//! no gain in a reference server: a clean `cargo build --release` of a crate
//! depending only on rustls 0.23.46 took 1m54s with aws-lc-rs and 1m04s with
//! ring on this 2-core VM.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("--cert {}: reading PEM certificates", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "--cert {}: no CERTIFICATE block in the file",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--key {}: reading a PEM private key", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("rustls: protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--cert/--key: the key does not fit the certificate, or is unsupported")?;
    // Server preference order: h2 first, so a client offering both gets h2.
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}
