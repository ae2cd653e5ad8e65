//! PEM files in, rustls `ServerConfig`s out: one for TCP (ALPN h2 then
//! http/1.1) and, with `--h3`, one for QUIC (ALPN h3), both from the same
//! certificate and key.
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
pub const ALPN_H3: &[u8] = b"h3";

/// `--cert` and `--key` as read, so the TCP and the QUIC config are built
/// from one read of the files.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Identity> {
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
    Ok(Identity { chain, key })
}

pub fn server_config(id: &Identity) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("rustls: protocol versions")?
        .with_no_client_auth()
        .with_single_cert(id.chain.clone(), id.key.clone_key())
        .context("--cert/--key: the key does not fit the certificate, or is unsupported")?;
    // Server preference order: h2 first, so a client offering both gets h2.
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// The QUIC side: TLS 1.3 only and ALPN `h3` only, because QUIC carries
/// nothing else (RFC 9001 §4.2, RFC 9114 §3.1).
pub fn h3_config(id: &Identity) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("rustls: TLS 1.3 for QUIC")?
        .with_no_client_auth()
        .with_single_cert(id.chain.clone(), id.key.clone_key())
        .context("--cert/--key: the key does not fit the certificate, or is unsupported")?;
    config.alpn_protocols = vec![ALPN_H3.to_vec()];
    // QUIC allows only 0 or u32::MAX here (RFC 9001 §4.6.1). u32::MAX, as
    // quinn's own default config has it, lets a client that resumes send
    // 0-RTT; a client that does not is unaffected. Every route is a GET with
    // a fixed body, so a replayed request changes nothing.
    config.max_early_data_size = u32::MAX;
    Ok(config)
}
