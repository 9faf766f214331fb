//! The fake's TLS: a CA made at startup (its certificate written for the daemon
//! to trust) and a server certificate for the vendor's host names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA file and the server's certificate and key.
pub struct Pki {
    /// Where the CA certificate (PEM) is.
    pub ca_file: PathBuf,
    server_cert: String,
    server_key: String,
}

impl Pki {
    /// Makes a CA and a server certificate for `names` (and 127.0.0.1), writing the
    /// CA's certificate into `dir`.
    pub fn generate(dir: &Path, names: &[&str]) -> Result<Pki, String> {
        let err = |e: &dyn std::fmt::Display| format!("making the fake's certificates: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| err(&e))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "plimsoll-fake CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(|e| err(&e))?).map_err(|e| err(&e))?;
        let key = KeyPair::generate().map_err(|e| err(&e))?;
        let mut sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        sans.push("127.0.0.1".into());
        let cert = CertificateParams::new(sans).map_err(|e| err(&e))?.signed_by(&key, &ca).map_err(|e| err(&e))?;
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).map_err(|e| err(&e))?;
        Ok(Pki { ca_file, server_cert: cert.pem(), server_key: key.serialize_pem() })
    }

    /// The server's TLS configuration, offering HTTP/2 and HTTP/1.1.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.server_cert.as_bytes()).filter_map(Result::ok).collect();
        let key = PrivateKeyDer::from_pem_slice(self.server_key.as_bytes());
        let mut cfg = match key.map_err(|e| e.to_string()).and_then(|key| {
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .map_err(|e| e.to_string())
        }) {
            Ok(cfg) => cfg,
            Err(e) => {
                eprintln!("plimsoll-fake: the server certificate: {e}");
                std::process::exit(2);
            }
        };
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}
