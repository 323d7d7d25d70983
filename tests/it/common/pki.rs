//! Certificates made at test time (rcgen): a CA and the server and client certificates
//! it signs, written as PEM files, for the TLS tests of the gRPC port and the dashboard.

use std::path::PathBuf;

use super::TempDir;

/// A CA made at test time, and certificates it (or a stranger CA) signed.
pub struct Pki {
    pub dir: TempDir,
    pub ca_pem: String,
}

/// A certificate and its key, PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl Pki {
    pub fn new() -> (Self, rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "turnstile test CA");
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = rcgen::CertifiedIssuer::self_signed(params, key).expect("ca");
        let pki = Self {
            dir: TempDir::new("pki"),
            ca_pem: ca.pem(),
        };
        (pki, ca)
    }

    pub fn issue(ca: &rcgen::Issuer<'_, rcgen::KeyPair>, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).expect("params");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, ca).expect("sign");
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    pub fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = self.dir.0.join(file);
        std::fs::write(&path, text).expect("write pem");
        path
    }
}
