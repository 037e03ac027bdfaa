//! Idempotency keys: how a retried write gets its original outcome instead
//! of being applied twice.
//!
//! A write may carry a [`RequestId`](crate::RequestId). In the write's own atomic step the
//! engine records, under the lock, the id, a fingerprint of the request
//! (computed here, once, by the store) and the outcome. At least the last
//! [`StoreConfig::idempotency_window`] ids of each lock are kept (the sled
//! engine keeps them in a ring of slots numbered by a per-lock counter: the
//! write that takes slot `n mod window` evicts the id that held it). All of
//! this is in the same step as the data, so a remembered id is exactly as
//! durable as the write it stands for.
//!
//! Only applied writes are remembered: a refused request changed nothing,
//! so retrying it is the same as sending it for the first time.
//!
//! [`StoreConfig::idempotency_window`]: crate::StoreConfig::idempotency_window

use palisade_core::{Mode, Sequencer};
use sha2::{Digest as _, Sha256};

use crate::Op;

/// What a fingerprint is computed over, written once for both hashes.
trait Sink {
    fn bytes(&mut self, bytes: &[u8]);

    fn len_prefixed(&mut self, bytes: &[u8]) {
        self.bytes(&(bytes.len() as u64).to_be_bytes());
        self.bytes(bytes);
    }

    fn optional(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            None => self.bytes(&[0]),
            Some(bytes) => {
                self.bytes(&[1]);
                self.len_prefixed(bytes);
            }
        }
    }
}

impl Sink for Sha256 {
    fn bytes(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// FNV-1a, 64 bits: the fingerprint of idempotency records written before
/// SHA-256, still compared when such a record is retried.
struct Fnv64(u64);

impl Sink for Fnv64 {
    fn bytes(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The mode, the generation and every op, length-prefixed so that no two
/// requests feed the same bytes.
fn feed(sink: &mut impl Sink, sequencer: &Sequencer, ops: &[Op]) {
    sink.bytes(&[match sequencer.mode() {
        Mode::Exclusive => 1,
        Mode::Shared => 2,
    }]);
    sink.bytes(&sequencer.generation().get().to_be_bytes());
    sink.bytes(&(ops.len() as u64).to_be_bytes());
    for op in ops {
        match op {
            Op::Put { key, value } => {
                sink.bytes(b"P");
                sink.len_prefixed(key);
                sink.len_prefixed(value);
            }
            Op::Delete { key } => {
                sink.bytes(b"D");
                sink.len_prefixed(key);
            }
            Op::Cas { key, expected, new } => {
                sink.bytes(b"C");
                sink.len_prefixed(key);
                sink.optional(expected.as_deref());
                sink.optional(new.as_deref());
            }
        }
    }
}

/// What identifies "the same request" for an idempotency key: the mode,
/// the generation and every op, hashed with SHA-256 (a 64-bit hash could
/// let two different requests collide and one be answered with the other's
/// outcome). A retry sends exactly these again.
pub(crate) fn fingerprint(sequencer: &Sequencer, ops: &[Op]) -> [u8; FINGERPRINT_LEN] {
    let mut hash = Sha256::new();
    feed(&mut hash, sequencer, ops);
    hash.finalize().into()
}

/// The length of [`fingerprint`], in bytes.
pub(crate) const FINGERPRINT_LEN: usize = 32;

/// The FNV-1a fingerprint of the same request, for records written before
/// the fingerprint was SHA-256.
pub(crate) fn legacy_fingerprint(sequencer: &Sequencer, ops: &[Op]) -> u64 {
    let mut hash = Fnv64(0xcbf2_9ce4_8422_2325);
    feed(&mut hash, sequencer, ops);
    hash.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(mode: Mode, generation: u64) -> Sequencer {
        crate::test_sequencer("a", mode, generation)
    }

    #[test]
    fn fingerprints_are_sha256_of_the_framed_request() {
        let sequencer = seq(Mode::Exclusive, 3);
        let ops = [Op::put("k", "v")];
        let mut framed = vec![1];
        framed.extend_from_slice(&3u64.to_be_bytes());
        framed.extend_from_slice(&1u64.to_be_bytes());
        framed.extend_from_slice(b"P");
        for part in [&b"k"[..], b"v"] {
            framed.extend_from_slice(&(part.len() as u64).to_be_bytes());
            framed.extend_from_slice(part);
        }
        let expected: [u8; 32] = Sha256::digest(&framed).into();
        assert_eq!(fingerprint(&sequencer, &ops), expected);
        // The FNV fingerprint of older records hashes the same framing.
        let mut fnv = Fnv64(0xcbf2_9ce4_8422_2325);
        fnv.bytes(&framed);
        assert_eq!(legacy_fingerprint(&sequencer, &ops), fnv.0);
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let base = fingerprint(&seq(Mode::Exclusive, 3), &[Op::put("k", "v")]);
        assert_eq!(
            base,
            fingerprint(&seq(Mode::Exclusive, 3), &[Op::put("k", "v")])
        );
        let others = [
            fingerprint(&seq(Mode::Exclusive, 4), &[Op::put("k", "v")]),
            fingerprint(&seq(Mode::Shared, 3), &[Op::put("k", "v")]),
            fingerprint(&seq(Mode::Exclusive, 3), &[Op::put("k", "w")]),
            fingerprint(&seq(Mode::Exclusive, 3), &[Op::put("kv", "")]),
            fingerprint(&seq(Mode::Exclusive, 3), &[Op::delete("k")]),
            fingerprint(&seq(Mode::Exclusive, 3), &[]),
            fingerprint(
                &seq(Mode::Exclusive, 3),
                &[Op::cas("k", None, Some("v".into()))],
            ),
            fingerprint(
                &seq(Mode::Exclusive, 3),
                &[Op::cas("k", Some("v".into()), None)],
            ),
        ];
        for other in others {
            assert_ne!(base, other);
        }
    }
}
