//! Sequencers and their canonical `v1` text form.
//!
//! The text form *is* the wire format: it travels in one HTTP header
//! ([`Sequencer::HTTP_HEADER`]), in environment variables and in logs, and
//! signatures are computed over it. There is deliberately no serde derive;
//! JSON carriers put the text form in a string.
//!
//! ```text
//! v1;lock=orders/42;mode=exclusive;gen=33[;issuer=..][;holder=..][;lease=..][;expires=..][;sig=<key id>:<hex>]
//! ```
//!
//! - Segments are separated by `;`; the first is the version, `v1`.
//! - Fields appear in exactly the order above, each at most once; `lock`,
//!   `mode` and `gen` are required, the rest optional. Unknown fields are
//!   refused rather than ignored, because a signature could not cover them.
//! - Text values are percent-encoded: every byte outside
//!   `A-Z a-z 0-9 - . _ ~ /` becomes `%XX` with upper-case hex. Numbers are
//!   decimal without leading zeros.
//! - The whole text is visible ASCII, at most [`Sequencer::MAX_TEXT_LEN`]
//!   bytes. Every valid sequencer fits.
//!
//! Parsing accepts only this canonical form, so `parse(text).to_string() ==
//! text` for every accepted `text`, and two sequencers are equal exactly when
//! their texts are.

use std::fmt;
use std::str::FromStr;

use crate::encoding::{self, SEQUENCER_VALUE};
use crate::{Generation, LockName, LockNameError, Mode};

/// A Chubby-style sequencer: proof that some holder was granted `lock` in
/// `mode` with `generation`, plus optional context from the lock side.
///
/// A resource server decides with the first three fields alone; the optional
/// ones serve the live check, diagnostics and signatures.
///
/// ```
/// use palisade_core::{Generation, LockName, Mode, Sequencer};
///
/// let seq = Sequencer::new(
///     LockName::new("orders/42")?,
///     Mode::Exclusive,
///     Generation::new(33).unwrap(),
/// )
/// .with_issuer("etcd-prod")?;
///
/// let text = seq.to_string();
/// assert_eq!(text, "v1;lock=orders/42;mode=exclusive;gen=33;issuer=etcd-prod");
/// assert_eq!(text.parse::<Sequencer>()?, seq);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sequencer {
    lock: LockName,
    mode: Mode,
    generation: Generation,
    /// Which lock deployment minted this (an etcd cluster, a Redis
    /// deployment). Generations from different issuers are not comparable, so
    /// a resource server that knows its issuer can refuse strangers.
    issuer: Option<String>,
    /// Who holds it: a session or client id, for logs and live checks.
    holder: Option<String>,
    /// The lease behind the hold (etcd lease id, Redis owner hash), for live
    /// checks.
    lease: Option<String>,
    /// When the issuer expected the lease to end, in milliseconds since the
    /// Unix epoch. A hint for humans and schedulers only: wall clocks are not
    /// trusted for safety.
    expires_unix_ms: Option<u64>,
    signature: Option<Signature>,
}

/// A MAC over [`Sequencer::signing_payload`], with the id of the key that
/// made it so keys can be rotated.
///
/// Core only carries signatures; computing and checking them is the job of
/// the signing layer, which owns the keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    key_id: String,
    mac: Vec<u8>,
}

/// Why a text is not a sequencer, or a field value cannot go in one.
///
/// Each malformed shape has its own variant, so the resource server can say
/// precisely what is wrong. Offending input echoed back in an error is
/// clipped to 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequencerError {
    /// The text is empty.
    #[error("sequencer is empty")]
    Empty,
    /// The text is longer than [`Sequencer::MAX_TEXT_LEN`].
    #[error("sequencer is {len} bytes long; the limit is {max} bytes", max = Sequencer::MAX_TEXT_LEN)]
    TooLong {
        /// The length offered, in bytes.
        len: usize,
    },
    /// A byte outside visible ASCII (`!` to `~`).
    #[error("sequencer contains a byte outside visible ASCII at index {index}")]
    NotPrintable {
        /// Byte offset of the first such byte.
        index: usize,
    },
    /// The first segment is not a supported version.
    #[error("unsupported sequencer version `{found}`; expected `v1`")]
    BadVersion {
        /// The first segment (clipped).
        found: String,
    },
    /// A segment without `=`, or an empty segment.
    #[error("sequencer segment `{segment}` is not of the form `field=value`")]
    MalformedSegment {
        /// The segment (clipped).
        segment: String,
    },
    /// A field name this version does not define.
    #[error("unknown sequencer field `{field}`")]
    UnknownField {
        /// The field name (clipped).
        field: String,
    },
    /// A field given twice.
    #[error("sequencer field `{field}` appears more than once")]
    DuplicateField {
        /// The field name.
        field: &'static str,
    },
    /// A field before one that must precede it.
    #[error(
        "sequencer field `{field}` is out of order; the order is lock, mode, gen, issuer, holder, lease, expires, sig"
    )]
    OutOfOrder {
        /// The field name.
        field: &'static str,
    },
    /// A required field is absent.
    #[error("sequencer has no `{field}` field")]
    MissingField {
        /// The field name.
        field: &'static str,
    },
    /// A value is not canonically percent-encoded UTF-8.
    #[error("sequencer field `{field}`: {reason}")]
    BadEncoding {
        /// The field name.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The lock name decodes but is not a valid [`LockName`].
    #[error("sequencer field `lock`: {0}")]
    BadLockName(#[from] LockNameError),
    /// The mode is not `exclusive` or `shared`.
    #[error("sequencer field `mode`: unknown mode `{found}`; expected `exclusive` or `shared`")]
    BadMode {
        /// The mode offered (clipped).
        found: String,
    },
    /// The generation is 0, which no grant ever has.
    #[error("sequencer field `gen`: generation 0 is never issued")]
    ZeroGeneration,
    /// A number field is not a canonical decimal `u64`.
    #[error("sequencer field `{field}`: `{found}` is {reason}")]
    BadNumber {
        /// The field name.
        field: &'static str,
        /// The value offered (clipped).
        found: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An identifier field (issuer, holder, lease, key id) is empty, too long
    /// or contains a control character.
    #[error("sequencer field `{field}`: {reason}")]
    BadId {
        /// The field name.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The `sig` field is not `<key id>:<lower-case hex MAC>` of a valid size.
    #[error("sequencer field `sig`: {reason}")]
    BadSignature {
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The fields of the `v1` form, in their canonical order.
const FIELDS: [&str; 8] = [
    "lock", "mode", "gen", "issuer", "holder", "lease", "expires", "sig",
];

impl Sequencer {
    /// The HTTP header a sequencer travels in.
    pub const HTTP_HEADER: &'static str = "palisade-sequencer";

    /// The text-form version this crate writes and reads.
    pub const VERSION: &'static str = "v1";

    /// The longest text form accepted, in bytes.
    pub const MAX_TEXT_LEN: usize = 4096;

    /// The longest issuer, holder or lease id, in bytes.
    pub const MAX_ID_LEN: usize = 128;

    /// The longest signing key id, in bytes.
    pub const MAX_KEY_ID_LEN: usize = 64;

    /// The longest MAC, in bytes (enough for SHA-512 based MACs).
    pub const MAX_MAC_LEN: usize = 64;

    /// A sequencer with the three required fields.
    pub fn new(lock: LockName, mode: Mode, generation: Generation) -> Self {
        Sequencer {
            lock,
            mode,
            generation,
            issuer: None,
            holder: None,
            lease: None,
            expires_unix_ms: None,
            signature: None,
        }
    }

    /// Sets the issuer id (1 to [`Sequencer::MAX_ID_LEN`] bytes, no control
    /// characters).
    pub fn with_issuer(mut self, issuer: &str) -> Result<Self, SequencerError> {
        validate_id("issuer", issuer, Self::MAX_ID_LEN)?;
        self.issuer = Some(issuer.to_owned());
        Ok(self)
    }

    /// Checks an issuer id by the rules of [`Sequencer::with_issuer`], for
    /// a configuration that takes one before any sequencer exists: what
    /// passes here cannot make a later sequencer fail.
    pub fn check_issuer(issuer: &str) -> Result<(), SequencerError> {
        validate_id("issuer", issuer, Self::MAX_ID_LEN)
    }

    /// Checks a holder id by the rules of [`Sequencer::with_holder`] (see
    /// [`Sequencer::check_issuer`]).
    pub fn check_holder(holder: &str) -> Result<(), SequencerError> {
        validate_id("holder", holder, Self::MAX_ID_LEN)
    }

    /// Sets the holder id (same rules as the issuer).
    pub fn with_holder(mut self, holder: &str) -> Result<Self, SequencerError> {
        validate_id("holder", holder, Self::MAX_ID_LEN)?;
        self.holder = Some(holder.to_owned());
        Ok(self)
    }

    /// Sets the lease id (same rules as the issuer).
    pub fn with_lease(mut self, lease: &str) -> Result<Self, SequencerError> {
        validate_id("lease", lease, Self::MAX_ID_LEN)?;
        self.lease = Some(lease.to_owned());
        Ok(self)
    }

    /// Sets the expiry hint, in milliseconds since the Unix epoch.
    pub fn with_expiry_hint(mut self, expires_unix_ms: u64) -> Self {
        self.expires_unix_ms = Some(expires_unix_ms);
        self
    }

    /// Attaches a signature. Any previous signature is replaced.
    pub fn with_signature(mut self, signature: Signature) -> Self {
        self.signature = Some(signature);
        self
    }

    /// Removes the signature, if any.
    pub fn without_signature(mut self) -> Self {
        self.signature = None;
        self
    }

    /// The lock this sequencer is for.
    pub fn lock(&self) -> &LockName {
        &self.lock
    }

    /// The mode it was granted in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Its fencing token.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The issuer id, if the lock side set one.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The holder id, if the lock side set one.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// The lease id, if the lock side set one.
    pub fn lease(&self) -> Option<&str> {
        self.lease.as_deref()
    }

    /// The expiry hint in milliseconds since the Unix epoch, if set.
    pub fn expires_unix_ms(&self) -> Option<u64> {
        self.expires_unix_ms
    }

    /// The signature, if any.
    pub fn signature(&self) -> Option<&Signature> {
        self.signature.as_ref()
    }

    /// The canonical text of every field except the signature: the bytes a
    /// signature is computed over.
    ///
    /// ```
    /// use palisade_core::{Generation, LockName, Mode, Sequencer, Signature};
    ///
    /// let seq = Sequencer::new(LockName::new("a")?, Mode::Shared, Generation::MIN)
    ///     .with_signature(Signature::new("k1", vec![0xab, 0xcd])?);
    /// assert_eq!(seq.signing_payload(), "v1;lock=a;mode=shared;gen=1");
    /// assert_eq!(seq.to_string(), "v1;lock=a;mode=shared;gen=1;sig=k1:abcd");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn signing_payload(&self) -> String {
        let mut out = String::with_capacity(64);
        self.write_unsigned(&mut out)
            .expect("writing to a String cannot fail");
        out
    }

    fn write_unsigned(&self, out: &mut impl fmt::Write) -> fmt::Result {
        write!(
            out,
            "{};lock={};mode={};gen={}",
            Self::VERSION,
            encoding::encode(self.lock.as_str(), SEQUENCER_VALUE),
            self.mode,
            self.generation
        )?;
        for (field, value) in [
            ("issuer", &self.issuer),
            ("holder", &self.holder),
            ("lease", &self.lease),
        ] {
            if let Some(value) = value {
                write!(out, ";{field}={}", encoding::encode(value, SEQUENCER_VALUE))?;
            }
        }
        if let Some(expires) = self.expires_unix_ms {
            write!(out, ";expires={expires}")?;
        }
        Ok(())
    }
}

impl Signature {
    /// A signature made with key `key_id` (1 to [`Sequencer::MAX_KEY_ID_LEN`]
    /// bytes, no control characters); `mac` is 1 to
    /// [`Sequencer::MAX_MAC_LEN`] bytes.
    pub fn new(key_id: &str, mac: Vec<u8>) -> Result<Self, SequencerError> {
        validate_id("sig", key_id, Sequencer::MAX_KEY_ID_LEN)?;
        if mac.is_empty() || mac.len() > Sequencer::MAX_MAC_LEN {
            return Err(SequencerError::BadSignature {
                reason: "the MAC must be 1 to 64 bytes",
            });
        }
        Ok(Signature {
            key_id: key_id.to_owned(),
            mac,
        })
    }

    /// The id of the key that made the MAC.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The MAC bytes.
    pub fn mac(&self) -> &[u8] {
        &self.mac
    }
}

impl fmt::Display for Sequencer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_unsigned(f)?;
        if let Some(signature) = &self.signature {
            write!(
                f,
                ";sig={}:{}",
                encoding::encode(&signature.key_id, SEQUENCER_VALUE),
                hex::encode(&signature.mac)
            )?;
        }
        Ok(())
    }
}

impl FromStr for Sequencer {
    type Err = SequencerError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text)
    }
}

impl TryFrom<&str> for Sequencer {
    type Error = SequencerError;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        parse(text)
    }
}

fn parse(text: &str) -> Result<Sequencer, SequencerError> {
    if text.is_empty() {
        return Err(SequencerError::Empty);
    }
    if text.len() > Sequencer::MAX_TEXT_LEN {
        return Err(SequencerError::TooLong { len: text.len() });
    }
    if let Some(index) = text.bytes().position(|b| !(b'!'..=b'~').contains(&b)) {
        return Err(SequencerError::NotPrintable { index });
    }

    let mut segments = text.split(';');
    let version = segments.next().unwrap_or_default();
    if version != Sequencer::VERSION {
        return Err(SequencerError::BadVersion {
            found: crate::clip(version),
        });
    }

    // Raw values by field index; the order and duplicate checks happen here,
    // the value checks below, so errors name the first structural problem.
    let mut values: [Option<&str>; FIELDS.len()] = [None; FIELDS.len()];
    let mut last_index = None;
    for segment in segments {
        let Some((field, value)) = segment.split_once('=') else {
            return Err(SequencerError::MalformedSegment {
                segment: crate::clip(segment),
            });
        };
        let Some(index) = FIELDS.iter().position(|f| *f == field) else {
            return Err(SequencerError::UnknownField {
                field: crate::clip(field),
            });
        };
        if values[index].is_some() {
            return Err(SequencerError::DuplicateField {
                field: FIELDS[index],
            });
        }
        if last_index.is_some_and(|last| index < last) {
            return Err(SequencerError::OutOfOrder {
                field: FIELDS[index],
            });
        }
        last_index = Some(index);
        values[index] = Some(value);
    }
    let [lock, mode, generation, issuer, holder, lease, expires, sig] = values;

    let lock = lock.ok_or(SequencerError::MissingField { field: "lock" })?;
    let mode = mode.ok_or(SequencerError::MissingField { field: "mode" })?;
    let generation = generation.ok_or(SequencerError::MissingField { field: "gen" })?;

    let lock = LockName::new(decode("lock", lock)?)?;
    let mode = mode
        .parse::<Mode>()
        .map_err(|e| SequencerError::BadMode { found: e.found })?;
    let generation =
        Generation::new(parse_decimal("gen", generation)?).ok_or(SequencerError::ZeroGeneration)?;

    let mut sequencer = Sequencer::new(lock, mode, generation);
    if let Some(issuer) = issuer {
        sequencer = sequencer.with_issuer(&decode("issuer", issuer)?)?;
    }
    if let Some(holder) = holder {
        sequencer = sequencer.with_holder(&decode("holder", holder)?)?;
    }
    if let Some(lease) = lease {
        sequencer = sequencer.with_lease(&decode("lease", lease)?)?;
    }
    if let Some(expires) = expires {
        sequencer = sequencer.with_expiry_hint(parse_decimal("expires", expires)?);
    }
    if let Some(sig) = sig {
        sequencer = sequencer.with_signature(parse_signature(sig)?);
    }
    Ok(sequencer)
}

fn decode(field: &'static str, value: &str) -> Result<String, SequencerError> {
    encoding::decode_canonical(value, SEQUENCER_VALUE).map_err(|e| SequencerError::BadEncoding {
        field,
        reason: e.reason(),
    })
}

fn parse_decimal(field: &'static str, value: &str) -> Result<u64, SequencerError> {
    let bad = |reason| SequencerError::BadNumber {
        field,
        found: crate::clip(value),
        reason,
    };
    if value.is_empty() {
        return Err(bad("empty"));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("not a decimal number"));
    }
    if value.len() > 1 && value.starts_with('0') {
        return Err(bad("written with a leading zero"));
    }
    value
        .parse::<u64>()
        .map_err(|_| bad("larger than the largest u64"))
}

fn parse_signature(value: &str) -> Result<Signature, SequencerError> {
    let Some((key_id, mac_hex)) = value.split_once(':') else {
        return Err(SequencerError::BadSignature {
            reason: "expected `<key id>:<hex MAC>`",
        });
    };
    let key_id = decode("sig", key_id)?;
    // The canonical form is lower case; `hex` would take upper case too.
    let lower_case = !mac_hex.bytes().any(|b| b.is_ascii_uppercase());
    let mac =
        hex::decode(mac_hex)
            .ok()
            .filter(|_| lower_case)
            .ok_or(SequencerError::BadSignature {
                reason: "the MAC must be an even number of lower-case hex digits",
            })?;
    Signature::new(&key_id, mac)
}

fn validate_id(field: &'static str, value: &str, max_len: usize) -> Result<(), SequencerError> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.len() > max_len {
        if max_len == Sequencer::MAX_KEY_ID_LEN {
            "longer than 64 bytes"
        } else {
            "longer than 128 bytes"
        }
    } else if value.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(SequencerError::BadId { field, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(input: &str, expected: Result<&str, SequencerError>) {
        let parsed = input.parse::<Sequencer>();
        match (&parsed, &expected) {
            (Ok(seq), Ok(canonical)) => {
                assert_eq!(&seq.to_string(), canonical, "input {input:?}");
                assert_eq!(input, *canonical, "only canonical text is accepted");
            }
            (Err(got), Err(want)) => assert_eq!(got, want, "input {input:?}"),
            _ => panic!("input {input:?}: expected {expected:?}, got {parsed:?}"),
        }
    }

    fn num(field: &'static str, found: &str, reason: &'static str) -> SequencerError {
        SequencerError::BadNumber {
            field,
            found: found.into(),
            reason,
        }
    }

    #[test]
    fn accepts_canonical_forms() {
        for ok in [
            "v1;lock=orders/42;mode=exclusive;gen=33",
            "v1;lock=a;mode=shared;gen=1",
            "v1;lock=a%20b%3Bc;mode=exclusive;gen=18446744073709551615",
            "v1;lock=%E6%97%A5;mode=exclusive;gen=7;issuer=etcd-prod;holder=host-1;lease=7587;expires=1732245600123;sig=k1:00ff",
            "v1;lock=a;mode=exclusive;gen=2;expires=0",
            "v1;lock=a;mode=exclusive;gen=2;lease=l;sig=key%3A1:ab",
        ] {
            check(ok, Ok(ok));
        }
    }

    #[test]
    fn each_malformed_shape_has_its_own_error() {
        use SequencerError as E;
        check("", Err(E::Empty));
        check(
            &format!("v1;lock={};mode=shared;gen=1", "a".repeat(5000)),
            Err(E::TooLong { len: 5026 }),
        );
        check(
            "v1;lock=a b;mode=shared;gen=1",
            Err(E::NotPrintable { index: 9 }),
        );
        check(
            "v1;lock=\u{e9};mode=shared;gen=1",
            Err(E::NotPrintable { index: 8 }),
        );
        check(
            "v2;lock=a;mode=shared;gen=1",
            Err(E::BadVersion { found: "v2".into() }),
        );
        check(
            "lock=a;mode=shared;gen=1",
            Err(E::BadVersion {
                found: "lock=a".into(),
            }),
        );
        check("v1", Err(E::MissingField { field: "lock" }));
        check(
            "v1;lock=a;mode=shared;gen=1;",
            Err(E::MalformedSegment { segment: "".into() }),
        );
        check(
            "v1;lock=a;mode=shared;gen",
            Err(E::MalformedSegment {
                segment: "gen".into(),
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;color=red",
            Err(E::UnknownField {
                field: "color".into(),
            }),
        );
        check(
            "v1;lock=a;lock=b;mode=shared;gen=1",
            Err(E::DuplicateField { field: "lock" }),
        );
        check(
            "v1;mode=shared;lock=a;gen=1",
            Err(E::OutOfOrder { field: "lock" }),
        );
        check("v1;lock=a;gen=1", Err(E::MissingField { field: "mode" }));
        check(
            "v1;lock=a;mode=shared",
            Err(E::MissingField { field: "gen" }),
        );
        check(
            "v1;lock=a%2;mode=shared;gen=1",
            Err(E::BadEncoding {
                field: "lock",
                reason: encoding::DecodeError::BadEscape.reason(),
            }),
        );
        check(
            "v1;lock=%61;mode=shared;gen=1",
            Err(E::BadEncoding {
                field: "lock",
                reason: encoding::DecodeError::NotCanonical.reason(),
            }),
        );
        check(
            "v1;lock=%C3%28;mode=shared;gen=1",
            Err(E::BadEncoding {
                field: "lock",
                reason: encoding::DecodeError::NotUtf8.reason(),
            }),
        );
        check(
            "v1;lock=;mode=shared;gen=1",
            Err(E::BadLockName(LockNameError::Empty)),
        );
        check(
            "v1;lock=a%0A;mode=shared;gen=1",
            Err(E::BadLockName(LockNameError::ControlChar {
                index: 1,
                character: '\n',
            })),
        );
        check(
            "v1;lock=a;mode=Exclusive;gen=1",
            Err(E::BadMode {
                found: "Exclusive".into(),
            }),
        );
        check("v1;lock=a;mode=shared;gen=0", Err(E::ZeroGeneration));
        check("v1;lock=a;mode=shared;gen=", Err(num("gen", "", "empty")));
        check(
            "v1;lock=a;mode=shared;gen=-1",
            Err(num("gen", "-1", "not a decimal number")),
        );
        check(
            "v1;lock=a;mode=shared;gen=+1",
            Err(num("gen", "+1", "not a decimal number")),
        );
        check(
            "v1;lock=a;mode=shared;gen=007",
            Err(num("gen", "007", "written with a leading zero")),
        );
        check(
            "v1;lock=a;mode=shared;gen=18446744073709551616",
            Err(num(
                "gen",
                "18446744073709551616",
                "larger than the largest u64",
            )),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;expires=soon",
            Err(num("expires", "soon", "not a decimal number")),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;issuer=",
            Err(E::BadId {
                field: "issuer",
                reason: "must not be empty",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;holder=%07",
            Err(E::BadId {
                field: "holder",
                reason: "contains a control character",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;sig=k1",
            Err(E::BadSignature {
                reason: "expected `<key id>:<hex MAC>`",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;sig=k1:ABCD",
            Err(E::BadSignature {
                reason: "the MAC must be an even number of lower-case hex digits",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;sig=k1:abc",
            Err(E::BadSignature {
                reason: "the MAC must be an even number of lower-case hex digits",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;sig=k1:",
            Err(E::BadSignature {
                reason: "the MAC must be 1 to 64 bytes",
            }),
        );
        check(
            "v1;lock=a;mode=shared;gen=1;sig=:ab",
            Err(E::BadId {
                field: "sig",
                reason: "must not be empty",
            }),
        );
    }

    #[test]
    fn errors_clip_what_they_echo() {
        let long = format!("v9{}", "x".repeat(1000));
        match long.parse::<Sequencer>() {
            Err(SequencerError::BadVersion { found }) => assert!(found.len() <= 64 + 3),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_largest_sequencer_fits() {
        // Every byte of every field escaped, every field at its longest.
        let name = LockName::new("\u{e9}".repeat(LockName::MAX_LEN / 2)).unwrap();
        let id = ";".repeat(Sequencer::MAX_ID_LEN);
        let seq = Sequencer::new(name, Mode::Exclusive, Generation::MAX)
            .with_issuer(&id)
            .unwrap()
            .with_holder(&id)
            .unwrap()
            .with_lease(&id)
            .unwrap()
            .with_expiry_hint(u64::MAX)
            .with_signature(
                Signature::new(&";".repeat(Sequencer::MAX_KEY_ID_LEN), vec![0xff; 64]).unwrap(),
            );
        let text = seq.to_string();
        assert!(text.len() <= Sequencer::MAX_TEXT_LEN, "{}", text.len());
        assert_eq!(text.parse::<Sequencer>().unwrap(), seq);
    }

    fn arb_id() -> impl Strategy<Value = String> {
        "[^\\p{Cc}]{1,40}".prop_filter("fits", |s| s.len() <= Sequencer::MAX_ID_LEN)
    }

    fn arb_sequencer() -> impl Strategy<Value = Sequencer> {
        (
            "[^\\p{Cc}]{1,200}".prop_filter("fits", |s| s.len() <= LockName::MAX_LEN),
            any::<bool>(),
            1..=u64::MAX,
            proptest::option::of(arb_id()),
            proptest::option::of(arb_id()),
            proptest::option::of(arb_id()),
            proptest::option::of(any::<u64>()),
            proptest::option::of((
                arb_id().prop_filter("key id", |s| s.len() <= 64),
                proptest::collection::vec(any::<u8>(), 1..=64),
            )),
        )
            .prop_map(
                |(name, shared, generation, issuer, holder, lease, expires, sig)| {
                    let mode = if shared {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    };
                    let mut seq = Sequencer::new(
                        LockName::new(name).unwrap(),
                        mode,
                        Generation::new(generation).unwrap(),
                    );
                    if let Some(issuer) = issuer {
                        seq = seq.with_issuer(&issuer).unwrap();
                    }
                    if let Some(holder) = holder {
                        seq = seq.with_holder(&holder).unwrap();
                    }
                    if let Some(lease) = lease {
                        seq = seq.with_lease(&lease).unwrap();
                    }
                    if let Some(expires) = expires {
                        seq = seq.with_expiry_hint(expires);
                    }
                    if let Some((key_id, mac)) = sig {
                        seq = seq.with_signature(Signature::new(&key_id, mac).unwrap());
                    }
                    seq
                },
            )
    }

    proptest! {
        #[test]
        fn text_form_round_trips(seq in arb_sequencer()) {
            let text = seq.to_string();
            prop_assert!(text.len() <= Sequencer::MAX_TEXT_LEN);
            prop_assert!(text.bytes().all(|b| (b'!'..=b'~').contains(&b)));
            prop_assert!(text.starts_with("v1;"));
            let parsed: Sequencer = text.parse().unwrap();
            prop_assert_eq!(&parsed, &seq);
            prop_assert_eq!(parsed.to_string(), text);
        }

        #[test]
        fn parser_never_panics_and_accepts_only_canonical(text in "\\PC{0,120}") {
            if let Ok(seq) = text.parse::<Sequencer>() {
                prop_assert_eq!(seq.to_string(), text);
            }
        }

        #[test]
        fn mutated_sequencers_are_refused_or_canonical(seq in arb_sequencer(), at in any::<prop::sample::Index>(), byte in 0x20u8..0x7f) {
            let mut bytes = seq.to_string().into_bytes();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let text = String::from_utf8(bytes).unwrap();
            if let Ok(parsed) = text.parse::<Sequencer>() {
                prop_assert_eq!(parsed.to_string(), text);
            }
        }
    }
}
