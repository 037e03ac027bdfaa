//! Signed sequencers: the cases every lock backend that signs runs.
//!
//! A backend describes how to connect a signing (or unsigned) client with
//! [`SigningBackend`], and [`signing_tests!`](crate::signing_tests) turns
//! the cases into one test each:
//!
//! ```text
//! palisade_testkit::signing_tests!(MyBackend::start().await);
//! ```
//!
//! | case | checks |
//! | --- | --- |
//! | [`every_sequencer_is_signed`] | `acquire`, `try_acquire`, shared holds and re-entry all hand out sequencers that verify (also as parsed text); a live check with the signer's issuer knows them |
//! | [`a_verifier_without_the_key_refuses`] | another secret, another key id, another issuer, a forged generation |
//! | [`rotation_accepts_old_and_new_keys`] | a ring with both keys accepts both; without the old key, the old sequencer is refused |
//! | [`without_a_signer_nothing_is_signed`] | no signature, the client's own issuer, `Unsigned` from a verifier |

use std::future::Future;

use palisade_core::{
    KeyRing, LiveCheck, Liveness, Lock, LockGuard, LockName, Mode, Sequencer, SignatureError,
    Signer, SigningKey, Verifier,
};

/// The issuer every signer of the suite names.
pub const ISSUER: &str = "palisade-signing-suite";

/// How the signing cases drive a backend.
pub trait SigningBackend: Send + Sync {
    /// What sessions are opened from (a connection, a client, a service).
    type Client: Send + Sync;
    /// The backend's session type.
    type Lock: Lock;
    /// The backend's live check.
    type Check: LiveCheck;

    /// Connects a new client to the backend's lock service. With a signer,
    /// every sequencer it hands out is signed and names the signer's
    /// issuer; without one, sequencers are unsigned and name the backend's
    /// own issuer.
    fn client(&self, signer: Option<Signer>) -> impl Future<Output = Self::Client> + Send;

    /// The issuer `client` writes into its sequencers.
    fn issuer(&self, client: &Self::Client) -> String;

    /// Opens a session on `client`.
    fn session(&self, client: &Self::Client) -> impl Future<Output = Self::Lock> + Send;

    /// A resource server's live check that trusts `signer`'s issuer and
    /// reads the lock service `client` uses.
    fn live_check(
        &self,
        client: &Self::Client,
        signer: Signer,
    ) -> impl Future<Output = Self::Check> + Send;

    /// Whether two clients share one lock service, so that a lock's
    /// generation keeps increasing from one client to the next. The
    /// embedded backend says no: each client is a service of its own.
    fn clients_share_a_service(&self) -> bool {
        true
    }
}

/// One `#[tokio::test]` per signing case, each on a backend built by
/// `$backend` (an expression, `.await` allowed; it runs once per test).
#[macro_export]
macro_rules! signing_tests {
    ($backend:expr) => {
        $crate::signing_tests!(@cases $backend;
            every_sequencer_is_signed,
            a_verifier_without_the_key_refuses,
            rotation_accepts_old_and_new_keys,
            without_a_signer_nothing_is_signed,
        );
    };
    (@cases $backend:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = $backend;
                $crate::signing_suite::$case(&backend).await;
            }
        )*
    };
}

/// A 32-byte test key filled with `fill`.
pub fn key(key_id: &str, fill: u8) -> SigningKey {
    SigningKey::new(key_id, [fill; 32]).expect("a valid test key")
}

/// A signer naming [`ISSUER`].
pub fn signer(key: SigningKey) -> Signer {
    Signer::new(ISSUER, key).expect("a valid issuer")
}

fn name(text: &str) -> LockName {
    LockName::new(text).expect("a valid test lock name")
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

/// Every sequencer a guard hands out is signed, each over its own fields,
/// and a live check configured with the signer's issuer recognizes it.
pub async fn every_sequencer_is_signed<B: SigningBackend>(backend: &B) {
    let client = backend.client(Some(signer(key("k1", 1)))).await;
    assert_eq!(backend.issuer(&client), ISSUER);
    let verifier = verifier([key("k1", 1)]);
    let alice = backend.session(&client).await;
    let bob = backend.session(&client).await;

    // Acquire, and both ways of reading the sequencer.
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
    let check = backend.live_check(&client, signer(key("k1", 1))).await;
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

/// A verifier refuses a sequencer it has no key for, one under another
/// secret, one from another issuer, and a forged generation.
pub async fn a_verifier_without_the_key_refuses<B: SigningBackend>(backend: &B) {
    let client = backend.client(Some(signer(key("k1", 1)))).await;
    let guard = backend
        .session(&client)
        .await
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
        .with_issuer("palisade-elsewhere")
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
    guard.release().await.unwrap();
}

/// The lock side switches from key k1 to k2 between two holders of one
/// lock: a ring with both keys accepts both sequencers, and once k1 is
/// dropped from the ring, k1's sequencers are refused.
pub async fn rotation_accepts_old_and_new_keys<B: SigningBackend>(backend: &B) {
    let ring: KeyRing = format!(
        "# rotation in progress\nk1 {}\nk2 {}\n",
        "01".repeat(32),
        "02".repeat(32)
    )
    .parse()
    .unwrap();
    let both = Verifier::from_keys(ring).with_issuer(ISSUER).unwrap();
    let lock = name("orders/42");

    let before = backend.client(Some(signer(key("k1", 1)))).await;
    let after = backend.client(Some(signer(key("k2", 2)))).await;
    let old_guard = backend
        .session(&before)
        .await
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let old_sequencer = old_guard.sequencer().unwrap();
    old_guard.release().await.unwrap();
    let new_guard = backend
        .session(&after)
        .await
        .acquire(&lock, Mode::Exclusive)
        .await
        .unwrap();
    let new_sequencer = new_guard.sequencer().unwrap();
    if backend.clients_share_a_service() {
        assert!(new_sequencer.generation() > old_sequencer.generation());
    }
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

/// Without a signer, sequencers carry no signature, name the client's own
/// issuer, and a verifier that requires signatures refuses them.
pub async fn without_a_signer_nothing_is_signed<B: SigningBackend>(backend: &B) {
    let client = backend.client(None).await;
    let issuer = backend.issuer(&client);
    let guard = backend
        .session(&client)
        .await
        .acquire(&name("orders/42"), Mode::Exclusive)
        .await
        .unwrap();
    assert_eq!(guard.issued().signature(), None);
    assert!(!guard.issued().to_string().contains(";sig="));
    assert_eq!(guard.issued().issuer(), Some(issuer.as_str()));
    assert_eq!(
        verifier([key("k1", 1)]).verify(guard.issued()),
        Err(SignatureError::Unsigned)
    );
    guard.release().await.unwrap();
}
