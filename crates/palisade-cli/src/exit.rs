//! Exit codes, and the one-line error every command ends with.
//!
//! The codes are part of the command line's contract (scripts branch on
//! them); they are listed in `docs/cli.md` and in `palisade --help`, and
//! never change meaning.

use std::fmt;

/// Success.
pub(crate) const OK: u8 = 0;
/// Any error: the resource server or the lock service cannot be reached or
/// failed, bad input (a malformed sequencer, an invalid lock name), a
/// backend that cannot be used.
pub(crate) const ERROR: u8 = 1;
/// A command line clap refused (its default code; listed for completeness).
pub(crate) const USAGE: u8 = 2;
/// `palisade get`: the key does not exist. `palisade unlock --force`: the
/// lock is not held (with that generation); nothing was changed.
pub(crate) const NOT_FOUND: u8 = 3;
/// Refused: the sequencer is stale (409 `stale`): a newer holder has been
/// honoured, or the lock service's generations went backwards (the message
/// says which when the server knows, and how to recover). Nothing was
/// changed.
pub(crate) const STALE: u8 = 4;
/// Refused for another reason: 409 `not_held` (live check), 403
/// `shared_on_write`, 412 `cas_mismatch`, 422 `idempotency_key_reused`.
/// Nothing was changed.
pub(crate) const REFUSED: u8 = 5;
/// `palisade lock`: the lock was not granted within `--wait`; the command
/// did not run. `palisade unlock --force`: the hold was ended but the lock
/// was not granted within `--wait`, so the evicted holder is NOT fenced.
pub(crate) const LOCK_NOT_ACQUIRED: u8 = 6;
/// `palisade lock`: the lease was lost while the command ran; the command
/// was sent SIGTERM (and SIGKILL after the grace period).
pub(crate) const LEASE_LOST: u8 = 7;
/// `palisade lock`: the command was found but could not be run (as `env`
/// and `timeout` do).
pub(crate) const CANNOT_RUN: u8 = 126;
/// `palisade lock`: the command was not found (as `env` and `timeout` do).
pub(crate) const COMMAND_NOT_FOUND: u8 = 127;

/// The code for "ended by signal `number`", by the shell's convention.
pub(crate) fn by_signal(number: i32) -> u8 {
    u8::try_from(128 + number.clamp(0, 127)).unwrap_or(u8::MAX)
}

/// An error with its exit code. Commands return it (inside `anyhow`) when
/// the code is anything but [`ERROR`]; `main` prints `palisade: <message>`
/// and exits with `code`.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit code.
    pub(crate) code: u8,
    /// One readable line, without the `palisade: ` prefix.
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The exit code and the one line to print for `error`.
///
/// A [`Failure`] keeps its code; anything else is [`ERROR`], printed with
/// its causes joined by `: ` (anyhow's `{:#}`). Line breaks inside a cause
/// become spaces: an error is always exactly one line.
pub(crate) fn describe(error: &anyhow::Error) -> (u8, String) {
    let code = error
        .downcast_ref::<Failure>()
        .map_or(ERROR, |failure| failure.code);
    let text = format!("{error:#}");
    let one_line = text
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    (code, one_line)
}

/// The table for `--help`, kept next to the constants it describes.
pub(crate) const HELP_TABLE: &str = "\
Exit codes:
  0    success
  1    error: server or lock service unreachable or failing, bad input
  2    usage error (bad flags or arguments)
  3    get: the key does not exist; unlock --force: the lock is not held
  4    refused: stale sequencer (409 stale; a newer holder, or a regression: raise-floor)
  5    refused: not_held, shared_on_write, cas_mismatch, idempotency_key_reused
  6    lock: not granted within --wait (the command did not run);
       unlock --force: evicted, but not granted within --wait: NOT fenced
  7    lock: lease lost while the command ran (it was sent SIGTERM, then SIGKILL)
  126  lock: the command could not be run; 127: the command was not found
  128+N lock: interrupted by signal N while waiting, or the command ended by it
Otherwise `palisade lock` exits with the command's own exit code.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_its_code_and_other_errors_are_one() {
        let stale = anyhow::Error::new(Failure::new(STALE, "refused"));
        assert_eq!(describe(&stale), (STALE, "refused".to_owned()));
        let plain = anyhow::anyhow!("cannot connect").context("palisade put");
        assert_eq!(
            describe(&plain),
            (ERROR, "palisade put: cannot connect".to_owned())
        );
    }

    #[test]
    fn an_error_is_always_one_line() {
        let error = anyhow::anyhow!("first line\nsecond line\r\n");
        assert_eq!(describe(&error).1, "first line second line");
    }

    #[test]
    fn signals_follow_the_shell_convention() {
        assert_eq!(by_signal(2), 130);
        assert_eq!(by_signal(15), 143);
        assert_eq!(by_signal(9), 137);
    }

    #[test]
    fn the_help_table_names_every_code() {
        for code in [
            OK,
            ERROR,
            USAGE,
            NOT_FOUND,
            STALE,
            REFUSED,
            LOCK_NOT_ACQUIRED,
            LEASE_LOST,
            CANNOT_RUN,
        ] {
            assert!(
                HELP_TABLE.contains(&format!("\n  {code} ")),
                "code {code} missing from the help table"
            );
        }
        assert!(HELP_TABLE.contains(&format!("{COMMAND_NOT_FOUND}: ")));
    }
}
