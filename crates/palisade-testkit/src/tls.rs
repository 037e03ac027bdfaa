//! A private certificate authority made at test time, for TLS tests
//! against real servers (Redis with `--tls-port`, the resource server with
//! rustls): the test decides exactly which CA signed what.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A private certificate authority, as a deployment would have.
pub struct Authority {
    /// The CA certificate, PEM: what clients are told to trust.
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its private key, PEM.
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
}

impl Authority {
    /// A fresh self-signed CA named `common_name`.
    pub fn new(common_name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        Authority {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> Issued {
        self.issue(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate.
    pub fn client(&self, common_name: &str) -> Issued {
        self.issue(
            vec![common_name.into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )
    }

    /// A certificate for `names` (the first is also the common name) with
    /// the given purpose, e.g. a server certificate for another host.
    pub fn issue(&self, names: Vec<String>, purpose: ExtendedKeyUsagePurpose) -> Issued {
        let common_name = names[0].clone();
        let mut params = CertificateParams::new(names).expect("certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
