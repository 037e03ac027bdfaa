//! The lock side's signing flags (`--sign-key-file`, `--sign-key-id`,
//! `--issuer`) and `palisade keygen`.
//!
//! With a key, every sequencer `palisade lock` hands to its command carries
//! an HMAC-SHA256 over all of its fields, made with one key of a key ring
//! file; resource servers holding the same ring refuse forgeries (say
//! generation `u64::MAX`, which would fence a lock forever) before they can
//! move a mark. The ring file is the format `palisade_core::KeyRing` reads,
//! one `<key id> <hex secret>` per line, and the same file a resource
//! server verifies with, so rotation is: add the new key to every ring,
//! switch `--sign-key-id`, drop the old key once the longest lease is over.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use palisade_core::{KeyRing, SigningKey};
use rand::TryRng as _;

/// Which key signs, and the issuer stamped on every sequencer.
///
/// Flattened into the backend flags, so every subcommand that acquires
/// a lock signs the same way.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct SigningArgs {
    /// Sign every sequencer with a key from this key ring file (one
    /// `<key id> <hex secret>` per line, `#` comments; `palisade keygen`
    /// prints a line). Resource servers verify with the same file.
    #[arg(
        long,
        env = "PALISADE_SIGN_KEY_FILE",
        value_name = "PATH",
        help_heading = "Signing"
    )]
    pub(crate) sign_key_file: Option<PathBuf>,

    /// Which key of the ring signs. Needed when the ring holds several keys
    /// (during a rotation); default: the ring's only key.
    #[arg(
        long,
        env = "PALISADE_SIGN_KEY_ID",
        value_name = "ID",
        requires = "sign_key_file",
        help_heading = "Signing"
    )]
    pub(crate) sign_key_id: Option<String>,

    /// The issuer id stamped on every sequencer: which lock deployment
    /// minted it. Default: the lock service's own id (etcd:
    /// `etcd-<cluster id>`, Redis: `redis@<host:port>`).
    #[arg(
        long,
        env = "PALISADE_ISSUER",
        value_name = "ID",
        help_heading = "Signing"
    )]
    pub(crate) issuer: Option<String>,
}

impl SigningArgs {
    /// The key that signs, read from the ring file, or `None` without
    /// `--sign-key-file`. Every problem is one line naming the file; the
    /// secret never appears in it.
    pub(crate) fn signing_key(&self) -> anyhow::Result<Option<SigningKey>> {
        let Some(path) = &self.sign_key_file else {
            return Ok(None);
        };
        let ring = read_ring(path)?;
        let listed = || ring.key_ids().collect::<Vec<_>>().join(", ");
        let key = match &self.sign_key_id {
            Some(key_id) => ring.get(key_id).with_context(|| {
                format!(
                    "the signing key ring {} has no key `{key_id}` (it has: {})",
                    path.display(),
                    listed()
                )
            })?,
            None => {
                let mut keys = ring.key_ids();
                match (keys.next(), keys.next()) {
                    (Some(only), None) => ring.get(only).expect("listed by the ring"),
                    (None, _) => anyhow::bail!(
                        "the signing key ring {} has no keys (add a line `<key id> <hex secret>`; `palisade keygen` prints one)",
                        path.display()
                    ),
                    (Some(_), Some(_)) => anyhow::bail!(
                        "the signing key ring {} has {} keys ({}); choose the one that signs with --sign-key-id",
                        path.display(),
                        ring.len(),
                        listed()
                    ),
                }
            }
        };
        Ok(Some(key.clone()))
    }
}

/// Reads and parses a key ring file.
fn read_ring(path: &Path) -> anyhow::Result<KeyRing> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the signing key ring {}", path.display()))?;
    text.parse::<KeyRing>()
        .with_context(|| format!("the signing key ring {} is invalid", path.display()))
}

/// Arguments of `palisade keygen`.
#[derive(Debug, Args)]
#[command(after_help = KEYGEN_EXAMPLES)]
pub(crate) struct KeygenArgs {
    /// The id of the new key (1 to 64 bytes, no whitespace, `:` or control
    /// characters). Use a new id for every key, so a rotation can keep the
    /// old and the new key in one ring.
    #[arg(long, default_value = "k1", value_name = "ID")]
    key_id: String,
}

const KEYGEN_EXAMPLES: &str = "\
Prints one key ring line, `<key id> <64 hex digits>`: a fresh 256-bit secret
from the operating system's random source. Append it to the ring file the
lock side signs with (--sign-key-file) and every resource server verifies
with; keep that file readable by those services only.

Examples:
  palisade keygen > /etc/palisade/keys && chmod 600 /etc/palisade/keys
  palisade keygen --key-id k2 >> /etc/palisade/keys     # start a rotation";

/// The size of a generated secret: HMAC-SHA256's block-sized sweet spot.
const SECRET_BYTES: usize = 32;

/// Runs `palisade keygen`: prints `<key id> <hex secret>`.
pub(crate) fn keygen(args: KeygenArgs) -> anyhow::Result<()> {
    let mut secret = [0u8; SECRET_BYTES];
    rand::rngs::SysRng
        .try_fill_bytes(&mut secret)
        .map_err(|error| anyhow::anyhow!("the operating system's random source failed: {error}"))?;
    let line = ring_line(&args.key_id, &secret)?;
    println!("{line}");
    Ok(())
}

/// One key ring line for `secret`, after checking that the ring would
/// accept it (so a bad `--key-id` fails here, not when the ring is read).
fn ring_line(key_id: &str, secret: &[u8]) -> anyhow::Result<String> {
    SigningKey::new(key_id, secret.to_vec())
        .map_err(|error| anyhow::anyhow!("--key-id {key_id:?}: {error}"))?;
    let hex: String = secret.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!("{key_id} {hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_line_reads_back_as_the_same_key() {
        let secret: Vec<u8> = (0..32).collect();
        let line = ring_line("k7", &secret).unwrap();
        assert_eq!(line.len(), 2 + 1 + 64);
        let ring: KeyRing = line.parse().unwrap();
        assert_eq!(
            ring.get("k7"),
            Some(&SigningKey::new("k7", secret).unwrap())
        );
        assert!(ring_line("bad id", &[0; 32]).is_err());
        assert!(ring_line("", &[0; 32]).is_err());
    }

    fn args(file: &Path, key_id: Option<&str>) -> SigningArgs {
        SigningArgs {
            sign_key_file: Some(file.to_owned()),
            sign_key_id: key_id.map(str::to_owned),
            issuer: None,
        }
    }

    #[test]
    fn the_key_is_the_only_one_or_the_one_named() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        std::fs::write(&one, format!("# test\nk1 {}\n", "11".repeat(32))).unwrap();
        let two = dir.path().join("two");
        std::fs::write(
            &two,
            format!("k1 {}\nk2 {}\n", "11".repeat(32), "22".repeat(32)),
        )
        .unwrap();

        let only = args(&one, None).signing_key().unwrap().unwrap();
        assert_eq!(only.key_id(), "k1");
        let named = args(&two, Some("k2")).signing_key().unwrap().unwrap();
        assert_eq!(named, SigningKey::new("k2", [0x22; 32]).unwrap());
        assert_eq!(SigningArgs::default().signing_key().unwrap(), None);

        let ambiguous = args(&two, None).signing_key().unwrap_err().to_string();
        assert!(ambiguous.contains("2 keys (k1, k2)"), "{ambiguous}");
        assert!(ambiguous.contains("--sign-key-id"), "{ambiguous}");
        let unknown = args(&two, Some("k3"))
            .signing_key()
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("no key `k3`"), "{unknown}");
    }

    #[test]
    fn a_bad_ring_names_the_file_and_never_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ring");
        std::fs::write(&file, "k1 00112233445566778899aabbccddeeff extra\n").unwrap();
        let error = format!("{:#}", args(&file, None).signing_key().unwrap_err());
        assert!(error.contains("ring"), "{error}");
        assert!(error.contains("line 1"), "{error}");
        assert!(!error.contains("00112233"), "{error}");

        std::fs::write(&file, "k1 0011\n").unwrap();
        let error = format!("{:#}", args(&file, None).signing_key().unwrap_err());
        assert!(error.contains("at least 16 bytes"), "{error}");

        let missing = dir.path().join("missing");
        let error = format!("{:#}", args(&missing, None).signing_key().unwrap_err());
        assert!(
            error.starts_with("cannot read the signing key ring"),
            "{error}"
        );
    }
}
