//! Signed sequencers from the etcd backend: every sequencer a guard hands
//! out verifies under the signer's key and issuer, fails under any other
//! key, and survives a key rotation.

use palisade_core::{
    KeyRing, LiveCheck, Liveness, Lock, LockError, LockGuard, Mode, Sequencer, SignatureError,
    Signer, SigningKey, Verifier,
};
use palisade_lock_etcd::{ConfigError, EtcdConfig, EtcdLiveCheck, EtcdLockClient};

use crate::fixtures::*;

const ISSUER: &str = "etcd-signing-test";

fn key(key_id: &str, fill: u8) -> SigningKey {
    SigningKey::new(key_id, [fill; 32]).expect("a valid test key")
}

fn signer(key: SigningKey) -> Signer {
    Signer::new(ISSUER, key).expect("a valid issuer")
}

fn verifier(keys: impl IntoIterator<Item = SigningKey>) -> Verifier {
    let mut verifier = Verifier::new();
    for key in keys {
        verifier = verifier.with_key(key).expect("distinct key ids");
    }
    verifier.with_issuer(ISSUER).expect("a valid issuer")
}

/// `sequencer` verifies, and so does its text form parsed back (what a
/// resource server receives in the header).
fn assert_verifies(verifier: &Verifier, sequencer: &Sequencer, what: &str) {
    assert_eq!(sequencer.issuer(), Some(ISSUER), "{what}: issuer");
    assert!(sequencer.signature().is_some(), "{what}: not signed");
    assert_eq!(verifier.verify(sequencer), Ok(()), "{what}: {sequencer}");
    let parsed: Sequencer = sequencer.to_string().parse().expect("canonical text");
    assert_eq!(verifier.verify(&parsed), Ok(()), "{what}: parsed text");
}

async fn signed_connection(endpoints: &[String], prefix: &str, key: SigningKey) -> EtcdLockClient {
    EtcdLockClient::connect(config(endpoints, prefix).with_signer(signer(key)))
        .await
        .expect("connect to etcd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sequencer_a_guard_hands_out_is_signed() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("signing");
    let connection = signed_connection(&etcd.endpoints(), &prefix, key("k1", 1)).await;
    assert_eq!(connection.issuer(), ISSUER);
    let verifier = verifier([key("k1", 1)]);
    let alice = session(&connection, options(10)).await;
    let bob = session(&connection, options(10)).await;

    let orders = name("orders/42");
    let guard = alice.acquire(&orders, Mode::Exclusive).await.unwrap();
    assert_verifies(&verifier, guard.issued(), "issued()");
    let sequencer = guard.sequencer().unwrap();
    assert_verifies(&verifier, &sequencer, "sequencer()");
    assert_eq!(
        sequencer.signature().map(|signature| signature.key_id()),
        Some("k1")
    );

    // Re-entry hands out the same signed text.
    let again = alice.acquire(&orders, Mode::Exclusive).await.unwrap();
    assert_eq!(
        again.issued(),
        guard.issued(),
        "re-entry keeps the sequencer"
    );

    // try_acquire and shared holds are signed too, each over its own fields.
    let report = name("reports/daily");
    let shared_a = alice
        .try_acquire(&report, Mode::Shared)
        .await
        .unwrap()
        .expect("free");
    let shared_b = bob.acquire(&report, Mode::Shared).await.unwrap();
    assert_verifies(&verifier, shared_a.issued(), "try_acquire, shared");
    assert_verifies(&verifier, shared_b.issued(), "second reader");
    assert_ne!(shared_a.issued().signature(), shared_b.issued().signature());

    // A resource server's live check configured with the same issuer (here:
    // the same signer) recognizes the signed sequencer as held.
    let check = EtcdLiveCheck::connect(
        config(&etcd.endpoints(), &prefix).with_signer(signer(key("k1", 1))),
    )
    .await
    .unwrap();
    assert_eq!(check.issuer(), ISSUER);
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::Held);

    again.release().await.unwrap();
    guard.release().await.unwrap();
    let next = bob.acquire(&orders, Mode::Exclusive).await.unwrap();
    assert!(next.generation() > sequencer.generation());
    assert_verifies(&verifier, next.issued(), "next holder");
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::NotHeld);
    next.release().await.unwrap();
    shared_a.release().await.unwrap();
    shared_b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifier_without_the_key_refuses() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("signing-wrong-key");
    let connection = signed_connection(&etcd.endpoints(), &prefix, key("k1", 1)).await;
    let guard = session(&connection, options(10))
        .await
        .acquire(&name("orders/42"), Mode::Exclusive)
        .await
        .unwrap();
    let sequencer = guard.sequencer().unwrap();

    assert_eq!(
        verifier([key("k1", 2)]).verify(&sequencer),
        Err(SignatureError::BadSignature {
            key_id: "k1".into()
        })
    );
    assert_eq!(
        verifier([key("k2", 1)]).verify(&sequencer),
        Err(SignatureError::UnknownKey {
            key_id: "k1".into()
        })
    );
    let forged: Sequencer = sequencer
        .to_string()
        .replace(
            &format!("gen={}", sequencer.generation()),
            &format!("gen={}", u64::MAX),
        )
        .parse()
        .unwrap();
    assert_eq!(
        verifier([key("k1", 1)]).verify(&forged),
        Err(SignatureError::BadSignature {
            key_id: "k1".into()
        })
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_a_ring_with_old_and_new_keys_accepts_both() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("signing-rotation");
    let ring: KeyRing = format!("k1 {}\nk2 {}\n", "01".repeat(32), "02".repeat(32))
        .parse()
        .unwrap();
    let both = Verifier::from_keys(ring).with_issuer(ISSUER).unwrap();
    let lock = name("orders/42");

    // The lock side switches from k1 to k2 between two holders of one lock.
    let before = signed_connection(&etcd.endpoints(), &prefix, key("k1", 1)).await;
    let after = signed_connection(&etcd.endpoints(), &prefix, key("k2", 2)).await;
    let old_guard = session(&before, options(10))
        .await
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let old_sequencer = old_guard.sequencer().unwrap();
    old_guard.release().await.unwrap();
    let new_guard = session(&after, options(10))
        .await
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let new_sequencer = new_guard.sequencer().unwrap();
    assert!(new_sequencer.generation() > old_sequencer.generation());
    assert_eq!(
        new_sequencer
            .signature()
            .map(|signature| signature.key_id()),
        Some("k2")
    );
    assert_verifies(&both, &old_sequencer, "signed with k1");
    assert_verifies(&both, &new_sequencer, "signed with k2");

    // Once k1 is dropped from the ring, its sequencers are refused.
    let only_new = verifier([key("k2", 2)]);
    assert_eq!(
        only_new.verify(&old_sequencer),
        Err(SignatureError::UnknownKey {
            key_id: "k1".into()
        })
    );
    assert_eq!(only_new.verify(&new_sequencer), Ok(()));
    new_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_signer_nothing_is_signed_and_a_conflicting_issuer_is_refused() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("signing-off");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let guard = session(&connection, options(10))
        .await
        .acquire(&name("orders/42"), Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(guard.issued().signature(), None);
    assert_eq!(guard.issued().issuer(), Some(connection.issuer()));
    assert!(connection.issuer().starts_with("etcd-"));
    assert_eq!(
        verifier([key("k1", 1)]).verify(guard.issued()),
        Err(SignatureError::Unsigned)
    );
    guard.release().await.unwrap();

    let conflicting: EtcdConfig = config(&etcd.endpoints(), &prefix)
        .with_issuer("etcd-other")
        .unwrap()
        .with_signer(signer(key("k1", 1)));
    let error = EtcdLockClient::connect(conflicting).await.unwrap_err();
    let LockError::Backend { source, .. } = &error else {
        panic!("expected a configuration error, got {error:?}");
    };
    assert_eq!(
        source.downcast_ref::<ConfigError>(),
        Some(&ConfigError::IssuerConflict {
            configured: "etcd-other".into(),
            signer: ISSUER.into(),
        })
    );
}
