//! TLS client configuration: the CA from a PEM file, the server name, one
//! ALPN protocol. Verification is always on; a server whose certificate does
//! not chain to that CA fails its handshake (`tls: invalid peer certificate:
//! UnknownIssuer`).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::LoadError;

pub(crate) fn connector(
    ca_pem: &Path,
    server_name: &str,
    alpn: &str,
) -> Result<(TlsConnector, ServerName<'static>), LoadError> {
    let ca_err = |why: String| LoadError::Ca {
        path: ca_pem.to_path_buf(),
        why,
    };
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_pem)
        .map_err(|e| ca_err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ca_err(e.to_string()))?;
    if certs.is_empty() {
        return Err(ca_err("no CERTIFICATE in the file".into()));
    }
    for c in certs {
        roots.add(c).map_err(|e| ca_err(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ca_err(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    let name =
        ServerName::try_from(server_name.to_string()).map_err(|e| LoadError::ServerName {
            name: server_name.to_string(),
            why: e.to_string(),
        })?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}
