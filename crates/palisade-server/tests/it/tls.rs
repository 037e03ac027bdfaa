//! TLS (`run` with `AppState::with_tls`) over real TCP: a client trusting
//! the test CA writes and reads; a plain-HTTP client and a client trusting
//! another CA fail cleanly, and the server stays healthy.

use std::sync::Arc;
use std::time::Duration;

use palisade_server::{AppState, ServerError, TlsConfig, run};
use palisade_store::{Store, StoreConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A private CA, as a deployment would have.
struct Authority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Authority {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost: (cert, key) PEM.
    fn server_cert(&self) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// One HTTPS request (with `connection: close`) trusting `ca_pem`; the raw
/// answer.
async fn https(addr: std::net::SocketAddr, ca_pem: &str, request: &str) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = connector.connect(name, tcp).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn put(lock: &str, generation: u64, value: &str) -> String {
    format!(
        "PUT /v1/locks/{lock}/keys/k HTTP/1.1\r\nhost: 127.0.0.1\r\npalisade-sequencer: v1;lock={lock};mode=exclusive;gen={generation}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{value}",
        value.len()
    )
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_clients_trusting_the_ca_are_served_and_others_fail_cleanly() {
    let authority = Authority::new("Palisade test CA");
    let (cert_pem, key_pem) = authority.server_cert();
    let tls = TlsConfig::from_pem(cert_pem.as_bytes(), key_pem.as_bytes()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        run(listener, AppState::new(store).with_tls(tls), async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });

    let written = https(addr, &authority.cert_pem, &put("t", 3, "secret value"))
        .await
        .unwrap();
    assert!(written.starts_with("HTTP/1.1 200"), "{written}");
    assert!(written.contains("\"commit_seq\""), "{written}");
    let read = https(addr, &authority.cert_pem, &get("/v1/locks/t/keys/k"))
        .await
        .unwrap();
    assert!(
        read.starts_with("HTTP/1.1 200") && read.ends_with("secret value"),
        "{read}"
    );

    // Plain HTTP on the TLS port: no HTTP answer, the connection closes.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(put("t", 4, "plain").as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer))
        .await
        .expect("the server closes a plain-HTTP connection");
    assert!(
        read.is_err() || !answer.starts_with(b"HTTP/"),
        "a plain-HTTP client got an HTTP answer: {:?}",
        String::from_utf8_lossy(&answer)
    );

    // A client that trusts another CA refuses the server's certificate.
    let stranger = Authority::new("Someone else's CA");
    let error = https(addr, &stranger.cert_pem, &get("/healthz"))
        .await
        .unwrap_err();
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );

    // Neither changed anything, and the server is healthy.
    let marks = https(addr, &authority.cert_pem, &get("/v1/locks/t/marks"))
        .await
        .unwrap();
    assert!(marks.contains("\"exclusive\":3"), "{marks}");
    let metrics = https(addr, &authority.cert_pem, &get("/metrics"))
        .await
        .unwrap();
    let failed = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("palisade_connections_closed_total{reason=\"tls_handshake_failed\"} ")
        })
        .unwrap();
    assert_eq!(failed, "2", "{metrics}");

    stop.send(()).unwrap();
    server.await.unwrap();
}

#[test]
fn unusable_certificates_and_keys_are_refused_at_start() {
    let authority = Authority::new("Palisade test CA");
    let (cert_pem, key_pem) = authority.server_cert();
    let (_, other_key_pem) = authority.server_cert();
    let error_of =
        |cert: &str, key: &str| match TlsConfig::from_pem(cert.as_bytes(), key.as_bytes()) {
            Err(ServerError::Tls { reason }) => reason,
            other => panic!("expected a TLS error, got {other:?}"),
        };
    assert!(error_of("not pem", &key_pem).contains("no CERTIFICATE"));
    assert!(error_of(&cert_pem, "not pem").contains("private key"));
    assert!(error_of(&cert_pem, &other_key_pem).contains("do not go together"));
    assert!(TlsConfig::from_pem(cert_pem.as_bytes(), key_pem.as_bytes()).is_ok());
}
