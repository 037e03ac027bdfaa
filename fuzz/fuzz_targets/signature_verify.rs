//! Signature verification: arbitrary bytes parsed as a sequencer, then
//! verified against a fixed key ring.
//!
//! Never panics; and a sequencer that verifies is exactly what the signer
//! of its key would have produced (signing it again changes nothing), from
//! the trusted issuer.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use palisade_core::{Sequencer, Signer, SigningKey, Verifier};

/// The issuer the seeds in `fuzz/seeds/sequencer/` are signed as.
const ISSUER: &str = "fuzz-issuer";

/// The keys the signed seeds use: `k1` = 32 bytes of 0x42, `k2` = 32 bytes
/// of 0x43.
static KEYS: LazyLock<[SigningKey; 2]> = LazyLock::new(|| {
    [
        SigningKey::new("k1", [0x42; 32]).expect("a valid key"),
        SigningKey::new("k2", [0x43; 32]).expect("a valid key"),
    ]
});

static VERIFIER: LazyLock<Verifier> = LazyLock::new(|| {
    let mut verifier = Verifier::new();
    for key in KEYS.iter() {
        verifier = verifier.with_key(key.clone()).expect("distinct key ids");
    }
    verifier.with_issuer(ISSUER).expect("a valid issuer")
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sequencer) = text.parse::<Sequencer>() else {
        return;
    };
    // A verifier without keys accepts nothing.
    assert!(Verifier::new().verify(&sequencer).is_err());
    match VERIFIER.verify(&sequencer) {
        Ok(()) => {
            assert_eq!(sequencer.issuer(), Some(ISSUER));
            let key_id = sequencer
                .signature()
                .expect("a verified sequencer is signed")
                .key_id();
            let key = KEYS
                .iter()
                .find(|key| key.key_id() == key_id)
                .expect("verified under a known key");
            let signer = Signer::new(ISSUER, key.clone()).expect("a valid issuer");
            assert_eq!(signer.sign(sequencer.clone()), sequencer, "{text:?}");
        }
        Err(error) => {
            // Every refusal has a stable code and a message.
            assert!(!error.code().is_empty());
            let _ = error.is_unauthenticated();
            assert!(!error.to_string().is_empty());
        }
    }
});
