//! The fake's TLS: a CA made at startup (its certificate written for the daemon
//! to trust), a server certificate for the vendor's host names, and a client
//! certificate (CN `plimsoll`, OU `admin`) for a vendor that takes only mutual
//! TLS, written with its key for the daemon to present.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA file, the client's certificate and key files, and the server's
/// certificate and key.
pub struct Pki {
    /// Where the CA certificate (PEM) is.
    pub ca_file: PathBuf,
    /// Where the client certificate (PEM) is.
    pub client_cert_file: PathBuf,
    /// Where the client certificate's key (PEM, PKCS#8) is.
    pub client_key_file: PathBuf,
    ca_cert: String,
    server_cert: String,
    server_key: String,
    /// The CA itself, to issue a certificate for any name a sandbox's egress
    /// proxy is asked for.
    ca: Arc<CertifiedIssuer<'static, KeyPair>>,
}

impl Pki {
    /// Makes a CA, a server certificate for `names` (and 127.0.0.1) and a client
    /// certificate, writing `ca.pem`, `client.pem` and `client.key` into `dir`.
    pub fn generate(dir: &Path, names: &[&str]) -> Result<Pki, String> {
        let err = |e: &dyn std::fmt::Display| format!("making the fake's certificates: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| err(&e))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "plimsoll-fake CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(|e| err(&e))?).map_err(|e| err(&e))?;
        let key = KeyPair::generate().map_err(|e| err(&e))?;
        let mut sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        sans.push("127.0.0.1".into());
        let cert = CertificateParams::new(sans).map_err(|e| err(&e))?.signed_by(&key, &ca).map_err(|e| err(&e))?;
        let client_key = KeyPair::generate().map_err(|e| err(&e))?;
        let mut client = CertificateParams::new(Vec::<String>::new()).map_err(|e| err(&e))?;
        client.distinguished_name.push(DnType::CommonName, "plimsoll");
        client.distinguished_name.push(DnType::OrganizationalUnitName, "admin");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = client.signed_by(&client_key, &ca).map_err(|e| err(&e))?;
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).map_err(|e| err(&e))?;
        let client_cert_file = dir.join("client.pem");
        std::fs::write(&client_cert_file, client.pem()).map_err(|e| err(&e))?;
        let client_key_file = dir.join("client.key");
        write_private(&client_key_file, &client_key.serialize_pem()).map_err(|e| err(&e))?;
        Ok(Pki {
            ca_file,
            client_cert_file,
            client_key_file,
            ca_cert: ca.pem(),
            server_cert: cert.pem(),
            server_key: key.serialize_pem(),
            ca: Arc::new(ca),
        })
    }

    /// The CA certificate (PEM): what a sandbox trusts for its proxied HTTPS.
    pub fn ca_pem(&self) -> &str {
        &self.ca_cert
    }

    /// A server configuration (HTTP/1.1) whose one certificate, for `name`, the
    /// CA signs: what a sandbox's egress proxy shows for the name it was asked.
    ///
    /// # Errors
    ///
    /// The name cannot stand in a certificate.
    pub fn leaf_config(&self, name: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let cert = CertificateParams::new(vec![name.to_string()])
            .and_then(|p| p.signed_by(&key, &*self.ca))
            .map_err(|e| e.to_string())?;
        let der = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der)
            .map_err(|e| e.to_string())?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }

    /// The server's TLS configuration, offering HTTP/2 and HTTP/1.1.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.config(None)
    }

    /// The server's TLS configuration that requires a client certificate issued
    /// by the fake's CA: a client without one fails the handshake.
    pub fn mtls_server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(self.ca_cert.as_bytes()).filter_map(Result::ok) {
            let _ = roots.add(ca);
        }
        match rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build() {
            Ok(verifier) => self.config(Some(verifier)),
            Err(e) => {
                eprintln!("plimsoll-fake: the client certificate verifier: {e}");
                std::process::exit(2);
            }
        }
    }

    fn config(
        &self,
        clients: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.server_cert.as_bytes()).filter_map(Result::ok).collect();
        let key = PrivateKeyDer::from_pem_slice(self.server_key.as_bytes());
        let mut cfg = match key.map_err(|e| e.to_string()).and_then(|key| {
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_client_cert_verifier(clients.unwrap_or_else(|| Arc::new(rustls::server::NoClientAuth)))
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

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())
}
