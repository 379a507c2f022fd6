//! Certificates made for a test: a CA, and server or client certificates it signs (rcgen).

use std::path::{Path, PathBuf};

use leasehold::tls::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A certificate authority of one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("ca key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("ca certificate"),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost, written to `dir` as the listener's
    /// files (`server.pem`, `server.key`); clients must present a certificate `clients` signed.
    pub fn server_files(&self, dir: &TempDir, clients: Option<&TestCa>) -> TlsFiles {
        let issued = self.server();
        TlsFiles {
            cert: dir.write("server.pem", &issued.cert),
            key: dir.write("server.key", &issued.key),
            client_ca: clients.map(|ca| dir.write("clients.pem", &ca.pem())),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Issued {
        self.issue("leasehold test server", ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate whose subject is `CN=<common_name>`.
    pub fn client(&self, common_name: &str) -> Issued {
        self.issue(common_name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, common_name: &str, usage: ExtendedKeyUsagePurpose) -> Issued {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A temporary folder for one test's files, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-{what}-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// Writes `contents` to `name` in the folder; its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        // Written aside and renamed, as a certificate manager does: never half a file.
        let partial = self.0.join(format!(".{name}.partial"));
        std::fs::write(&partial, contents).expect("write");
        std::fs::rename(&partial, &path).expect("rename");
        path
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    u64::from(nanos) ^ (u64::from(std::process::id()) << 32)
}
