//! Signed sequencers: HMAC-SHA256 over every field, with a key id so keys
//! can be rotated, and an issuer id naming the lock deployment that minted
//! the generation.
//!
//! Without signatures, anyone who can reach a resource server can present
//! `gen=18446744073709551615` and fence a lock forever. With them, only a
//! holder of a signing key (the lock side) can mint a sequencer a resource
//! server will honour, and the mark never moves for a forgery.
//!
//! The lock side holds a [`Signer`] (one active key); resource servers hold
//! a [`Verifier`] (every key still accepted, and the issuers they trust).
//! Rotation: add the new key to every verifier, switch signers to it, wait
//! for the longest lease to run out, drop the old key from the verifiers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::sequencer::{Sequencer, SequencerError, Signature};

type HmacSha256 = Hmac<Sha256>;

/// One shared secret and its id. The secret never appears in `Debug` output
/// or error messages.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    key_id: String,
    secret: Vec<u8>,
}

/// What can be wrong with a key or a key ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key id is empty, longer than 64 bytes, or has a control
    /// character or whitespace.
    #[error("invalid key id: {reason}")]
    BadKeyId {
        /// Why.
        reason: &'static str,
    },
    /// The secret is shorter than [`SigningKey::MIN_SECRET_LEN`] bytes.
    #[error("key `{key_id}`: the secret must be at least 16 bytes, got {len}")]
    ShortSecret {
        /// The key.
        key_id: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The secret is not hex.
    #[error("key `{key_id}`: the secret is not hex")]
    NotHex {
        /// The key.
        key_id: String,
    },
    /// A key-ring line is not `<key id> <hex secret>`.
    #[error("key ring line {line}: expected `<key id> <hex secret>`")]
    BadLine {
        /// 1-based line number.
        line: usize,
    },
    /// The same key id appears twice in a key ring.
    #[error("key `{key_id}` appears more than once")]
    DuplicateKey {
        /// The key.
        key_id: String,
    },
    /// The issuer id is not a valid sequencer id.
    #[error("invalid issuer: {0}")]
    BadIssuer(#[source] SequencerError),
}

impl SigningKey {
    /// The shortest secret accepted, in bytes. HMAC-SHA256 wants 32; 16 is
    /// the floor below which a key is a password, not a key.
    pub const MIN_SECRET_LEN: usize = 16;

    /// A key with id `key_id` (1 to 64 bytes, no whitespace or control
    /// characters) and a secret of at least 16 bytes.
    pub fn new(key_id: &str, secret: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let reason = if key_id.is_empty() {
            Some("must not be empty")
        } else if key_id.len() > Sequencer::MAX_KEY_ID_LEN {
            Some("longer than 64 bytes")
        } else if key_id
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == ':')
        {
            Some("contains whitespace, `:` or a control character")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(KeyError::BadKeyId { reason });
        }
        let secret = secret.into();
        if secret.len() < Self::MIN_SECRET_LEN {
            return Err(KeyError::ShortSecret {
                key_id: key_id.to_owned(),
                len: secret.len(),
            });
        }
        Ok(SigningKey {
            key_id: key_id.to_owned(),
            secret,
        })
    }

    /// A key from its id and its secret in hex.
    pub fn from_hex(key_id: &str, hex_secret: &str) -> Result<Self, KeyError> {
        let secret = hex::decode(hex_secret.trim()).map_err(|_| KeyError::NotHex {
            key_id: key_id.to_owned(),
        })?;
        Self::new(key_id, secret)
    }

    /// The key id, carried in every signature it makes.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    fn mac(&self, payload: &str) -> HmacSha256 {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.secret)
            .expect("HMAC takes keys of any length");
        mac.update(payload.as_bytes());
        mac
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.key_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Every key a verifier accepts, by id: the text form is one key per line,
/// `<key id> <hex secret>`, with `#` comments and blank lines ignored.
///
/// ```
/// use palisade_core::KeyRing;
///
/// let ring: KeyRing = "# rotated 2026-11\nk2 000102030405060708090a0b0c0d0e0f\nk1 0f0e0d0c0b0a09080706050403020100\n".parse()?;
/// assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["k1", "k2"]);
/// # Ok::<(), palisade_core::KeyError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRing {
    keys: BTreeMap<String, SigningKey>,
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key`; an id already present is an error (a ring that silently
    /// replaced a key would make rotation mistakes invisible).
    pub fn insert(&mut self, key: SigningKey) -> Result<(), KeyError> {
        if self.keys.contains_key(&key.key_id) {
            return Err(KeyError::DuplicateKey { key_id: key.key_id });
        }
        self.keys.insert(key.key_id.clone(), key);
        Ok(())
    }

    /// The key with id `key_id`.
    pub fn get(&self, key_id: &str) -> Option<&SigningKey> {
        self.keys.get(key_id)
    }

    /// The ids of the keys, sorted.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl FromStr for KeyRing {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        let mut ring = KeyRing::new();
        for entry in crate::two_columns(text) {
            let (_, key_id, secret) = entry.map_err(|line| KeyError::BadLine { line })?;
            ring.insert(SigningKey::from_hex(key_id, secret)?)?;
        }
        Ok(ring)
    }
}

/// The lock side's half: stamps the issuer id on a sequencer and signs
/// every field with the active key.
///
/// ```
/// use palisade_core::{Generation, LockName, Mode, Sequencer, Signer, SigningKey, Verifier};
///
/// let key = SigningKey::new("k1", *b"0123456789abcdef0123456789abcdef")?;
/// let signer = Signer::new("etcd-prod", key.clone())?;
/// let seq = signer.sign(Sequencer::new(LockName::new("orders/42")?, Mode::Exclusive, Generation::new(7).unwrap()));
/// assert_eq!(seq.issuer(), Some("etcd-prod"));
///
/// let verifier = Verifier::new().with_key(key)?.with_issuer("etcd-prod")?;
/// assert!(verifier.verify(&seq).is_ok());
/// let forged = seq.to_string().replace("gen=7", "gen=8").parse::<Sequencer>()?;
/// assert!(verifier.verify(&forged).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Signer {
    issuer: String,
    key: SigningKey,
}

impl Signer {
    /// A signer for the deployment named `issuer`, signing with `key`.
    pub fn new(issuer: &str, key: SigningKey) -> Result<Self, KeyError> {
        validate_issuer(issuer)?;
        Ok(Signer {
            issuer: issuer.to_owned(),
            key,
        })
    }

    /// The issuer id stamped on every sequencer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The id of the active key.
    pub fn key_id(&self) -> &str {
        &self.key.key_id
    }

    /// `sequencer` with this signer's issuer and a fresh signature over
    /// every other field (any previous signature is replaced).
    pub fn sign(&self, sequencer: Sequencer) -> Sequencer {
        let sequencer = sequencer
            .without_signature()
            .with_issuer(&self.issuer)
            .expect("the issuer was validated in Signer::new");
        let mac = self
            .key
            .mac(&sequencer.signing_payload())
            .finalize()
            .into_bytes()
            .to_vec();
        let signature =
            Signature::new(&self.key.key_id, mac).expect("key id validated, MAC is 32 bytes");
        sequencer.with_signature(signature)
    }
}

/// Why a verifier refused a sequencer. The mark never moves for any of
/// these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Signatures are required and this sequencer has none.
    #[error("the sequencer is not signed, and this server requires signatures")]
    Unsigned,
    /// The key id is not in the verifier's key ring (never issued, or
    /// already rotated out).
    #[error("the sequencer is signed with key `{key_id}`, which this server does not know")]
    UnknownKey {
        /// The key id presented.
        key_id: String,
    },
    /// The MAC does not match: some field was changed after signing, or
    /// the signer used another secret under the same id.
    #[error("the sequencer's signature (key `{key_id}`) does not match its fields")]
    BadSignature {
        /// The key id presented.
        key_id: String,
    },
    /// The signature is good but the issuer is not one this server trusts:
    /// generations from different deployments are not comparable.
    #[error("the sequencer was issued by {}, which this server does not accept", .issuer.as_deref().map_or("no named issuer".to_owned(), |i| format!("`{i}`")))]
    WrongIssuer {
        /// The issuer presented, if any.
        issuer: Option<String>,
    },
}

impl SignatureError {
    /// A short stable code for the refusal (`unsigned`, `unknown_key`,
    /// `bad_signature`, `wrong_issuer`), for HTTP bodies and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            SignatureError::Unsigned => "unsigned",
            SignatureError::UnknownKey { .. } => "unknown_key",
            SignatureError::BadSignature { .. } => "bad_signature",
            SignatureError::WrongIssuer { .. } => "wrong_issuer",
        }
    }

    /// Whether the presenter failed to prove anything (unsigned, unknown
    /// key, bad MAC: HTTP 401) rather than proved an identity that is not
    /// allowed here (another issuer: HTTP 403).
    pub fn is_unauthenticated(&self) -> bool {
        !matches!(self, SignatureError::WrongIssuer { .. })
    }
}

/// The resource server's half: the keys it accepts and the issuers it
/// trusts. An empty issuer set trusts any issuer whose sequencer verifies
/// under a known key.
#[derive(Debug, Clone, Default)]
pub struct Verifier {
    keys: KeyRing,
    issuers: BTreeSet<String>,
}

impl Verifier {
    /// A verifier with no keys: it refuses every sequencer until keys are
    /// added.
    pub fn new() -> Self {
        Self::default()
    }

    /// A verifier accepting every key of `keys`.
    pub fn from_keys(keys: KeyRing) -> Self {
        Verifier {
            keys,
            issuers: BTreeSet::new(),
        }
    }

    /// Also accepts signatures made with `key`.
    pub fn with_key(mut self, key: SigningKey) -> Result<Self, KeyError> {
        self.keys.insert(key)?;
        Ok(self)
    }

    /// Trusts `issuer`. Once any issuer is named, only named issuers pass.
    pub fn with_issuer(mut self, issuer: &str) -> Result<Self, KeyError> {
        validate_issuer(issuer)?;
        self.issuers.insert(issuer.to_owned());
        Ok(self)
    }

    /// The keys accepted.
    pub fn keys(&self) -> &KeyRing {
        &self.keys
    }

    /// The issuers trusted (empty: any).
    pub fn issuers(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(String::as_str)
    }

    /// Checks that `sequencer` is signed by a known key over exactly its
    /// fields, and comes from a trusted issuer. The MAC comparison is
    /// constant-time.
    pub fn verify(&self, sequencer: &Sequencer) -> Result<(), SignatureError> {
        let signature = sequencer.signature().ok_or(SignatureError::Unsigned)?;
        let key_id = signature.key_id();
        let key = self
            .keys
            .get(key_id)
            .ok_or_else(|| SignatureError::UnknownKey {
                key_id: key_id.to_owned(),
            })?;
        key.mac(&sequencer.signing_payload())
            .verify_slice(signature.mac())
            .map_err(|_| SignatureError::BadSignature {
                key_id: key_id.to_owned(),
            })?;
        if !self.issuers.is_empty()
            && !sequencer
                .issuer()
                .is_some_and(|issuer| self.issuers.contains(issuer))
        {
            return Err(SignatureError::WrongIssuer {
                issuer: sequencer.issuer().map(str::to_owned),
            });
        }
        Ok(())
    }
}

/// The sequencer's own id rules, so a signer can never stamp an issuer that
/// fails to parse.
fn validate_issuer(issuer: &str) -> Result<(), KeyError> {
    let probe = Sequencer::new(
        crate::LockName::new("probe").expect("a valid name"),
        crate::Mode::Shared,
        crate::Generation::MIN,
    );
    probe
        .with_issuer(issuer)
        .map(drop)
        .map_err(KeyError::BadIssuer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generation, LockName, Mode};

    fn key(id: &str, fill: u8) -> SigningKey {
        SigningKey::new(id, vec![fill; 32]).unwrap()
    }

    fn seq(generation: u64) -> Sequencer {
        Sequencer::new(
            LockName::new("orders/42").unwrap(),
            Mode::Exclusive,
            Generation::new(generation).unwrap(),
        )
        .with_holder("host-1")
        .unwrap()
    }

    #[test]
    fn signed_sequencer_round_trips_through_text_and_verifies() {
        let signer = Signer::new("etcd-prod", key("k1", 1)).unwrap();
        let signed = signer.sign(seq(7));
        let parsed: Sequencer = signed.to_string().parse().unwrap();
        let verifier = Verifier::new()
            .with_key(key("k1", 1))
            .unwrap()
            .with_issuer("etcd-prod")
            .unwrap();
        assert_eq!(verifier.verify(&parsed), Ok(()));
        assert_eq!(parsed.signature().unwrap().mac().len(), 32);
    }

    #[test]
    fn every_field_is_covered_by_the_mac() {
        let signer = Signer::new("etcd-prod", key("k1", 1)).unwrap();
        let verifier = Verifier::new().with_key(key("k1", 1)).unwrap();
        let text = signer.sign(seq(7).with_expiry_hint(1000)).to_string();
        for (from, to) in [
            ("gen=7", "gen=8"),
            ("lock=orders", "lock=orderz"),
            ("mode=exclusive", "mode=shared"),
            ("issuer=etcd-prod", "issuer=etcd-test"),
            ("holder=host-1", "holder=host-2"),
            ("expires=1000", "expires=1001"),
        ] {
            let forged: Sequencer = text.replace(from, to).parse().unwrap();
            assert_eq!(
                verifier.verify(&forged),
                Err(SignatureError::BadSignature {
                    key_id: "k1".into()
                }),
                "{from} -> {to}"
            );
        }
    }

    #[test]
    fn refusals_are_typed() {
        let verifier = Verifier::new()
            .with_key(key("k1", 1))
            .unwrap()
            .with_issuer("etcd-prod")
            .unwrap();
        assert_eq!(verifier.verify(&seq(1)), Err(SignatureError::Unsigned));
        let other_key = Signer::new("etcd-prod", key("k9", 1)).unwrap().sign(seq(1));
        assert_eq!(
            verifier.verify(&other_key).unwrap_err().code(),
            "unknown_key"
        );
        let wrong_secret = Signer::new("etcd-prod", key("k1", 2)).unwrap().sign(seq(1));
        assert_eq!(
            verifier.verify(&wrong_secret).unwrap_err().code(),
            "bad_signature"
        );
        let stranger = Signer::new("redis-eu", key("k1", 1)).unwrap().sign(seq(1));
        let error = verifier.verify(&stranger).unwrap_err();
        assert_eq!(error.code(), "wrong_issuer");
        assert!(!error.is_unauthenticated());
        assert!(error.to_string().contains("`redis-eu`"));
    }

    #[test]
    fn rotation_accepts_old_and_new_keys_until_the_old_one_is_dropped() {
        let old = Signer::new("etcd-prod", key("k1", 1)).unwrap().sign(seq(1));
        let new = Signer::new("etcd-prod", key("k2", 2)).unwrap().sign(seq(2));
        let both: KeyRing = format!("k1 {}\nk2 {}\n", "01".repeat(32), "02".repeat(32))
            .parse()
            .unwrap();
        let verifier = Verifier::from_keys(both);
        assert!(verifier.verify(&old).is_ok() && verifier.verify(&new).is_ok());
        let only_new: KeyRing = format!("k2 {}", "02".repeat(32)).parse().unwrap();
        let verifier = Verifier::from_keys(only_new);
        assert_eq!(verifier.verify(&old).unwrap_err().code(), "unknown_key");
        assert!(verifier.verify(&new).is_ok());
    }

    #[test]
    fn bad_keys_and_rings_are_typed_errors() {
        assert!(matches!(
            SigningKey::new("k1", *b"short"),
            Err(KeyError::ShortSecret { len: 5, .. })
        ));
        assert!(matches!(
            SigningKey::new("", vec![0; 32]),
            Err(KeyError::BadKeyId { .. })
        ));
        assert!(matches!(
            SigningKey::new("a b", vec![0; 32]),
            Err(KeyError::BadKeyId { .. })
        ));
        assert!(matches!(
            SigningKey::from_hex("k1", "zz"),
            Err(KeyError::NotHex { .. })
        ));
        assert_eq!(
            "k1 00\nk1".parse::<KeyRing>(),
            Err(KeyError::ShortSecret {
                key_id: "k1".into(),
                len: 1
            })
        );
        assert_eq!(
            "\n\nk1".parse::<KeyRing>(),
            Err(KeyError::BadLine { line: 3 })
        );
        let dup = format!("k1 {0}\nk1 {0}", "00".repeat(16));
        assert_eq!(
            dup.parse::<KeyRing>(),
            Err(KeyError::DuplicateKey {
                key_id: "k1".into()
            })
        );
        assert!(matches!(
            Signer::new("", key("k1", 1)),
            Err(KeyError::BadIssuer(_))
        ));
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let key = SigningKey::new("k1", *b"TOPSECRETTOPSECRET").unwrap();
        let shown = format!("{key:?} {:?}", Signer::new("x", key.clone()).unwrap());
        assert!(!shown.contains("TOPSECRET") && !shown.contains("84"));
        assert!(shown.contains("<redacted>"));
    }
}
