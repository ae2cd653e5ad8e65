//! TLS client configuration: the CA from a PEM file, the server name, one
//! ALPN protocol. Verification is on unless the user asked for `insecure`:
//! a server whose certificate does not chain to the CA fails its handshake
//! (`tls: invalid peer certificate: UnknownIssuer`). With `insecure` any
//! certificate is accepted — including a self-signed one that is its own CA
//! (`openssl req -x509` writes `CA:TRUE`, which webpki refuses as an end
//! entity with `CaUsedAsEndEntity`) — but the handshake signatures are still
//! checked, so the connection is real TLS to whoever holds the key.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

use super::LoadError;

pub(crate) fn connector(
    ca_pem: &Path,
    server_name: &str,
    alpn: &str,
    insecure: bool,
) -> Result<(TlsConnector, ServerName<'static>), LoadError> {
    let config = client_config(ca_pem, alpn, insecure)?;
    Ok((
        TlsConnector::from(Arc::new(config)),
        server_name_of(server_name)?,
    ))
}

/// A blocking client's TLS session (`rig ab`'s output comparison): the
/// configuration and the name to verify. `ca_pem` is ignored when
/// `insecure`.
pub fn tls_client_config(
    ca_pem: &Path,
    server_name: &str,
    alpn: &str,
    insecure: bool,
) -> Result<(ClientConfig, ServerName<'static>), LoadError> {
    Ok((
        client_config(ca_pem, alpn, insecure)?,
        server_name_of(server_name)?,
    ))
}

/// The name to verify the server's certificate against and send as SNI.
pub(crate) fn server_name_of(server_name: &str) -> Result<ServerName<'static>, LoadError> {
    ServerName::try_from(server_name.to_string()).map_err(|e| LoadError::ServerName {
        name: server_name.to_string(),
        why: e.to_string(),
    })
}

/// A client configuration offering one ALPN protocol (TLS over TCP, or
/// the TLS 1.3 inside QUIC).
pub(crate) fn client_config(
    ca_pem: &Path,
    alpn: &str,
    insecure: bool,
) -> Result<ClientConfig, LoadError> {
    let ca_err = |why: String| LoadError::Ca {
        path: ca_pem.to_path_buf(),
        why,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ca_err(format!("TLS configuration: {e}")))?;
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(ca_pem).map_err(ca_err)?)
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    Ok(config)
}

fn roots(ca_pem: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_pem)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no CERTIFICATE in the file".into());
    }
    for c in certs {
        roots.add(c).map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

/// `insecure`: every certificate is accepted; signatures are verified.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
