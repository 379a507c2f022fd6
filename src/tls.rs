//! TLS configurations built from PEM files: the gRPC listener's (with or without client
//! certificates) and the Redis connection's (`rediss://` with a CA of its own).
//!
//! One crypto provider (ring, as tonic's `tls-ring`) for both, chosen here rather than installed
//! process-wide, so a library user's own choice is never overridden.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};

use crate::error::{Error, Result};

/// The files of the listener's TLS, re-read on reload.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// When set, clients must present a certificate this CA (PEM) signed: mutual TLS.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Every file the configuration is built from, to watch for changes.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }

    /// Reads the files into a server configuration offering HTTP/2 (gRPC) by ALPN.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_error("protocol versions"))?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let roots = Arc::new(roots(ca)?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|error| {
                        Error::invalid(format!("client CA {}: {error}", ca.display()))
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|error| Error::invalid(format!("TLS key {}: {error}", self.key.display())))?;
        let mut config = builder
            .with_single_cert(certificates(&self.cert)?, key)
            .map_err(|error| {
                Error::invalid(format!(
                    "TLS certificate {} and key {}: {error}",
                    self.cert.display(),
                    self.key.display()
                ))
            })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A client configuration trusting only the CA certificates in `ca` (PEM).
pub fn client_config(ca: &Path) -> Result<ClientConfig> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error("protocol versions"))?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let unreadable = |error: rustls_pki_types::pem::Error| {
        Error::invalid(format!("{}: {error}", path.display()))
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certificates.is_empty() {
        return Err(Error::invalid(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certificates)
}

fn roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path)? {
        roots
            .add(certificate)
            .map_err(|error| Error::invalid(format!("CA {}: {error}", path.display())))?;
    }
    Ok(roots)
}

fn tls_error(context: &'static str) -> impl FnOnce(rustls::Error) -> Error {
    move |error| Error::invalid(format!("TLS {context}: {error}"))
}
