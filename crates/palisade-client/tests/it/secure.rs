//! The client against a hardened server (TLS, bearer tokens, signed
//! sequencers, a raise cap) on 127.0.0.1:0: the options work, and every
//! refusal arrives typed.

use std::time::Duration;

use palisade_client::{Client, ClientError, Refused};
use palisade_core::{Generation, LockName, Mode, Sequencer, Signer, SigningKey, Verifier};
use palisade_server::{AppState, TlsConfig, TokenTable, run};
use palisade_store::{Store, StoreConfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const TOKEN: &str = "orders-token-0123456789";
const ISSUER: &str = "etcd-prod";

/// A CA certificate (PEM) and a server certificate and key it signed for
/// 127.0.0.1 and localhost.
fn certificates() -> (String, String, String) {
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "Palisade test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut server = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    server.use_authority_key_identifier_extension = true;
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().unwrap();
    let server_pem = server.signed_by(&server_key, &issuer).unwrap().pem();
    (ca_pem, server_pem, server_key.serialize_pem())
}

fn signing_key(id: &str, fill: u8) -> SigningKey {
    SigningKey::new(id, vec![fill; 32]).unwrap()
}

fn sequencer(lock: &str, generation: u64) -> Sequencer {
    Sequencer::new(
        LockName::new(lock).unwrap(),
        Mode::Exclusive,
        Generation::new(generation).unwrap(),
    )
}

fn signed(lock: &str, generation: u64) -> Sequencer {
    Signer::new(ISSUER, signing_key("k1", 1))
        .unwrap()
        .sign(sequencer(lock, generation))
}

struct Secured {
    _dir: TempDir,
    port: u16,
    ca_pem: String,
    _stop: oneshot::Sender<()>,
}

/// TLS, one token for `orders/`, signatures required, raise cap 1000.
async fn start_secured() -> Secured {
    let (ca_pem, cert_pem, key_pem) = certificates();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let tokens: TokenTable = format!("{TOKEN} orders/").parse().unwrap();
    let verifier = Verifier::new()
        .with_key(signing_key("k1", 1))
        .unwrap()
        .with_issuer(ISSUER)
        .unwrap();
    let state = AppState::new(store)
        .with_tls(TlsConfig::from_pem(cert_pem.as_bytes(), key_pem.as_bytes()).unwrap())
        .with_tokens(tokens)
        .with_verifier(verifier, true)
        .with_max_mark_raise(Some(1000));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(run(listener, state, async {
        let _ = stopped.await;
    }));
    Secured {
        _dir: dir,
        port,
        ca_pem,
        _stop: stop,
    }
}

impl Secured {
    fn client(&self, token: Option<&str>) -> Client {
        let mut builder = Client::builder(&format!("https://127.0.0.1:{}", self.port))
            .timeout(Duration::from_secs(10))
            .root_ca_pem(&self.ca_pem);
        if let Some(token) = token {
            builder = builder.bearer_token(token);
        }
        builder.build().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_a_token_and_signed_sequencers_everything_works() {
    let server = start_secured().await;
    let client = server.client(Some(TOKEN));
    let orders = LockName::new("orders/1").unwrap();

    let written = client
        .put(&signed("orders/1", 5), b"stock", "7", Some("first"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written.marks.exclusive, 5);
    let read = client.get(&orders, b"stock", None).await.unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"7"[..]));
    assert_eq!(client.marks(&orders).await.unwrap().exclusive, 5);
    assert_eq!(
        client.health().await.unwrap().status,
        palisade_wire::HealthStatus::Ok
    );
    // Many requests over the pooled TLS connections.
    for generation in 6..=30 {
        let written = client
            .put(&signed("orders/1", generation), b"stock", "x", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(written.marks.exclusive, generation);
    }
    let replayed = client
        .put(&signed("orders/1", 5), b"stock", "7", Some("first"))
        .await
        .unwrap()
        .unwrap();
    assert!(replayed.replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_arrive_typed_and_change_nothing() {
    let server = start_secured().await;
    let client = server.client(Some(TOKEN));
    let orders = LockName::new("orders/2").unwrap();
    client
        .put(&signed("orders/2", 10), b"k", "v", None)
        .await
        .unwrap()
        .unwrap();

    let no_token = server.client(None);
    let error = no_token
        .put(&signed("orders/2", 11), b"k", "w", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::Unauthenticated { code, .. } if code == "unauthenticated"),
        "{error:?}"
    );
    let error = client
        .put(&signed("inventory/1", 1), b"k", "w", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::Forbidden { code, .. } if code == "forbidden"),
        "{error:?}"
    );
    assert_eq!(error.code(), Some("forbidden"));
    assert!(!error.is_transient());
    let error = client
        .put(&sequencer("orders/2", u64::MAX), b"k", "forged", None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("unsigned"), "{error:?}");
    let stranger = Signer::new("redis-eu", signing_key("k1", 1))
        .unwrap()
        .sign(sequencer("orders/2", 11));
    let error = client.put(&stranger, b"k", "w", None).await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Forbidden { code, .. } if code == "wrong_issuer"),
        "{error:?}"
    );
    let refused = client
        .put(&signed("orders/2", 5000), b"k", "runaway", None)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(refused, Refused::RaiseTooLarge { presented, max_raise: 1000, marks, by_clock: false, .. } if presented.get() == 5000 && marks.exclusive == 10),
        "{refused:?}"
    );
    assert_eq!(refused.reason(), "raise_too_large");

    assert_eq!(client.marks(&orders).await.unwrap().exclusive, 10);
    let read = client.get(&orders, b"k", None).await.unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"v"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_failures_are_typed_and_options_are_checked() {
    let server = start_secured().await;
    // A client that trusts another CA.
    let (other_ca, _, _) = certificates();
    let stranger = Client::builder(&format!("https://127.0.0.1:{}", server.port))
        .root_ca_pem(&other_ca)
        .bearer_token(TOKEN)
        .build()
        .unwrap();
    let error = stranger.health().await.unwrap_err();
    assert!(matches!(error, ClientError::Tls { .. }), "{error:?}");
    assert!(!error.is_transient());
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = Client::builder(&format!("http://127.0.0.1:{}", server.port))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    assert!(plain.health().await.is_err());
    // Nothing listening: a transient transport error.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let error = Client::builder(&format!("https://127.0.0.1:{closed_port}"))
        .root_ca_pem(&server.ca_pem)
        .build()
        .unwrap()
        .health()
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Https { .. }), "{error:?}");
    assert!(error.is_transient());

    let invalid = |result: Result<Client, ClientError>, option: &str| match result {
        Err(ClientError::InvalidOption { option: o, reason }) => {
            assert_eq!(o, option, "{reason}");
            assert!(!reason.contains("secret token"), "{reason}");
        }
        other => panic!("expected an invalid {option}, got {other:?}"),
    };
    invalid(
        Client::builder("https://127.0.0.1:1")
            .root_ca_pem("not pem")
            .build(),
        "root CA",
    );
    invalid(
        Client::builder("http://127.0.0.1:1")
            .root_ca_pem(&server.ca_pem)
            .build(),
        "root CA",
    );
    invalid(
        Client::builder("https://127.0.0.1:1")
            .root_ca_file("/nonexistent/ca.pem")
            .build(),
        "root CA",
    );
    invalid(
        Client::builder("http://127.0.0.1:1")
            .bearer_token("secret token")
            .build(),
        "bearer token",
    );
    let with_token = Client::new("http://127.0.0.1:1")
        .unwrap()
        .with_bearer_token(TOKEN)
        .unwrap();
    assert!(!format!("{with_token:?}").contains(TOKEN));
}
