//! The TLS side of a server: a certificate chain and key from PEM files, and
//! ALPN offering HTTP/2 first.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the TLS material was refused; the text names the file.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// An acceptor serving the chain in `cert` with the key in `key` (both PEM),
/// offering `h2` and then `http/1.1` by ALPN, with rustls's safe defaults.
///
/// # Errors
///
/// A file that cannot be read, holds no certificate, or a key that does not fit.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let read = |p: &Path, e: &dyn std::fmt::Display| TlsError(format!("reading {}: {e}", p.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| read(cert, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| read(cert, &e))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{} holds no certificate", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| read(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_certificate_file_is_named() {
        let dir = std::env::temp_dir().join(format!("plimsoll-serve-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let missing = dir.join("missing.pem");
        let err = acceptor(&missing, &empty).err().expect("refused");
        assert!(err.to_string().starts_with(&format!("reading {}: ", missing.display())), "{err}");
        assert_eq!(acceptor(&empty, &empty).err(), Some(TlsError(format!("{} holds no certificate", empty.display()))));
        let key = rcgen::KeyPair::generate().expect("key");
        let cert =
            rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params").self_signed(&key).expect("cert");
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        let acceptor = acceptor(&c, &k).expect("served");
        assert_eq!(acceptor.config().alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
