//! Signed sequencers from the embedded backend: every sequencer a guard
//! hands out verifies under the signer's key and issuer, fails under any
//! other key, and survives a key rotation.

use palisade_core::{
    KeyRing, LiveCheck, Liveness, Lock, LockGuard, LockName, Mode, Sequencer, SessionOptions,
    SignatureError, Signer, SigningKey, Verifier,
};
use palisade_lock_embedded::EmbeddedLockClient;

const ISSUER: &str = "embedded-signing-test";

fn key(key_id: &str, fill: u8) -> SigningKey {
    SigningKey::new(key_id, [fill; 32]).expect("a valid test key")
}

fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid test lock name")
}

fn signed_service(key: SigningKey) -> EmbeddedLockClient {
    EmbeddedLockClient::with_signer(Signer::new(ISSUER, key).expect("a valid issuer"))
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

#[tokio::test]
async fn every_sequencer_a_guard_hands_out_is_signed() {
    let service = signed_service(key("k1", 1));
    assert_eq!(service.issuer(), ISSUER);
    assert_eq!(service.signing_key_id(), Some("k1"));
    let verifier = verifier([key("k1", 1)]);
    let alice = service.session(SessionOptions::default()).unwrap();
    let bob = service.session(SessionOptions::default()).unwrap();

    // Acquire, and both ways of reading the sequencer.
    let orders = name("orders/42");
    let guard = alice.acquire(&orders, Mode::Exclusive).await.unwrap();
    assert_verifies(&verifier, guard.issued(), "issued()");
    let sequencer = guard.sequencer().unwrap();
    assert_verifies(&verifier, &sequencer, "sequencer()");

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

    // The live check still recognizes a signed sequencer as its own.
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::Held);

    again.release().await.unwrap();
    guard.release().await.unwrap();
    let next = bob.acquire(&orders, Mode::Exclusive).await.unwrap();
    assert!(next.generation() > sequencer.generation());
    assert_verifies(&verifier, next.issued(), "next holder");
    assert_eq!(service.check(&sequencer).await.unwrap(), Liveness::NotHeld);
}

#[tokio::test]
async fn a_verifier_without_the_key_refuses() {
    let service = signed_service(key("k1", 1));
    let session = service.session(SessionOptions::default()).unwrap();
    let guard = session
        .acquire(&name("orders/42"), Mode::Exclusive)
        .await
        .unwrap();
    let sequencer = guard.sequencer().unwrap();

    // Same key id, another secret: the MAC does not match.
    assert_eq!(
        verifier([key("k1", 2)]).verify(&sequencer),
        Err(SignatureError::BadSignature {
            key_id: "k1".into()
        })
    );
    // Another key id: unknown.
    assert_eq!(
        verifier([key("k2", 1)]).verify(&sequencer),
        Err(SignatureError::UnknownKey {
            key_id: "k1".into()
        })
    );
    // The right key, but a verifier that trusts another issuer.
    let elsewhere = Verifier::new()
        .with_key(key("k1", 1))
        .unwrap()
        .with_issuer("embedded-elsewhere")
        .unwrap();
    assert!(matches!(
        elsewhere.verify(&sequencer),
        Err(SignatureError::WrongIssuer { .. })
    ));
    // A forged generation under the right key.
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
}

#[tokio::test]
async fn rotation_a_ring_with_old_and_new_keys_accepts_both() {
    let ring: KeyRing = format!(
        "# rotation in progress\nk1 {}\nk2 {}\n",
        "01".repeat(32),
        "02".repeat(32)
    )
    .parse()
    .unwrap();
    let both = Verifier::from_keys(ring).with_issuer(ISSUER).unwrap();
    let lock = name("orders/42");

    let before = signed_service(key("k1", 1));
    let after = signed_service(key("k2", 2));
    let old_guard = before
        .session(SessionOptions::default())
        .unwrap()
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let new_guard = after
        .session(SessionOptions::default())
        .unwrap()
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(
        new_guard.issued().signature().map(|s| s.key_id()),
        Some("k2")
    );
    assert_verifies(&both, old_guard.issued(), "signed with k1");
    assert_verifies(&both, new_guard.issued(), "signed with k2");

    // Once k1 is dropped from the ring, its sequencers are refused.
    let only_new = verifier([key("k2", 2)]);
    assert_eq!(
        only_new.verify(old_guard.issued()),
        Err(SignatureError::UnknownKey {
            key_id: "k1".into()
        })
    );
    assert_eq!(only_new.verify(new_guard.issued()), Ok(()));
}

#[tokio::test]
async fn without_a_signer_nothing_is_signed() {
    let service = EmbeddedLockClient::with_issuer(ISSUER).unwrap();
    assert_eq!(service.signing_key_id(), None);
    let guard = service
        .session(SessionOptions::default())
        .unwrap()
        .acquire(&name("orders/42"), Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(guard.issued().signature(), None);
    assert!(!guard.issued().to_string().contains(";sig="));
    assert_eq!(
        verifier([key("k1", 1)]).verify(guard.issued()),
        Err(SignatureError::Unsigned)
    );
}
