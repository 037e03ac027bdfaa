//! Fencing on acquire: `palisade lock` raises the lock's marks at the
//! resource server to its new generation before the command starts.
//!
//! Without it, an older holder paused past its lease can still write
//! between this grant and the command's first request: nothing newer has
//! reached the server yet. With it, that write is refused (409 `stale`)
//! from the moment the command starts. It is on whenever a resource server
//! is known (`--server` / `PALISADE_SERVER`); `--no-fence` turns it off.

use std::time::Duration;

use clap::Args;
use palisade_client::{Client, Refused};
use palisade_core::{LockName, RegressionCause, Sequencer};

use crate::data::{ServerAuth, marks_text, server_error};
use crate::exit::{self, Failure};

/// How long one server may take to answer the fence.
const FENCE_TIMEOUT: Duration = Duration::from_secs(10);

/// The resource servers `palisade lock` fences, and how to reach them.
#[derive(Debug, Args)]
pub(crate) struct FenceArgs {
    /// Resource servers to fence before the command starts,
    /// comma-separated base URLs. With one server, the command gets it in
    /// PALISADE_SERVER.
    #[arg(long = "server", env = "PALISADE_SERVER", value_name = "URL[,URL...]")]
    servers: Option<String>,

    /// Do not fence: start the command without raising the lock's marks
    /// first. An older holder may then still write until the command's
    /// first request reaches the server.
    #[arg(long)]
    no_fence: bool,

    #[command(flatten)]
    auth: ServerAuth,
}

impl FenceArgs {
    /// The servers given, in order; empty when none is.
    fn servers(&self) -> Vec<&str> {
        self.servers
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect()
    }

    /// The one server to hand to the command, if exactly one is given.
    pub(crate) fn single_server(&self) -> Option<&str> {
        match self.servers().as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    fn client(&self, url: &str) -> anyhow::Result<Client> {
        self.auth
            .client(url, FENCE_TIMEOUT)
            .map_err(|error| anyhow::anyhow!("resource server `{url}`: {error}"))
    }

    /// Raises the marks of `sequencer`'s lock on every server, in order,
    /// printing one line per server unless `quiet`. Any failure means the
    /// command must not run; the error says why and what to do.
    pub(crate) async fn fence(&self, sequencer: &Sequencer, quiet: bool) -> anyhow::Result<()> {
        if self.no_fence {
            return Ok(());
        }
        let lock = sequencer.lock();
        for url in self.servers() {
            let client = self.client(url)?;
            let outcome = client.fence(sequencer).await.map_err(|error| {
                let cause = server_error(&error, url);
                anyhow::anyhow!(
                    "cannot fence lock `{lock}`: {cause:#}; the command did not run (--no-fence runs it without fencing)"
                )
            })?;
            match outcome {
                Ok(marks) => {
                    if !quiet {
                        say!(
                            "palisade: fenced lock `{lock}` at {url} ({}): older holders are refused from now on",
                            marks_text(marks)
                        );
                    }
                }
                Err(refused) => return Err(refusal(&refused, sequencer, url)),
            }
        }
        Ok(())
    }
}

/// A refused fence. `Stale` right after a grant means the lock service's
/// generations are behind the server's marks: it lost its counter (a Redis
/// restart without persistence, a restored etcd backup), or the mark is
/// one it never issued (a forged or runaway generation): core's
/// `RegressionCause` tells which it can.
fn refusal(refused: &Refused, sequencer: &Sequencer, url: &str) -> anyhow::Error {
    let (lock, generation) = (sequencer.lock(), sequencer.generation());
    match refused {
        Refused::Stale { marks, .. } => {
            let cause = RegressionCause::of(generation.get(), marks.required(sequencer.mode()));
            let recovery = if cause.floor_recovers() {
                format!(
                    "; recover with `{}` and this command's backend flags",
                    raise_floor_command(lock, url)
                )
            } else {
                String::new()
            };
            Failure::new(
                exit::STALE,
                format!(
                    "fencing lock `{lock}` at {url} was refused as stale: the lock service granted generation {generation} just now, but the server has honoured newer ones ({}); {}; the command did not run{recovery}",
                    marks_text(*marks),
                    cause.meaning(),
                ),
            )
            .into()
        }
        other => Failure::new(
            exit::REFUSED,
            format!(
                "fencing lock `{lock}` at {url} was refused ({}): {other}; the command did not run",
                other.reason()
            ),
        )
        .into(),
    }
}

fn raise_floor_command(lock: &LockName, url: &str) -> String {
    format!("{} --server {url}", lock.raise_floor_command())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(servers: Option<&str>) -> FenceArgs {
        FenceArgs {
            servers: servers.map(str::to_owned),
            no_fence: false,
            auth: ServerAuth::default(),
        }
    }

    #[test]
    fn servers_are_a_comma_separated_list() {
        assert!(args(None).servers().is_empty());
        assert_eq!(
            args(Some("http://a:1, http://b:2,")).servers(),
            ["http://a:1", "http://b:2"]
        );
        assert_eq!(args(Some("http://a:1")).single_server(), Some("http://a:1"));
        assert_eq!(args(Some("http://a:1,http://b:2")).single_server(), None);
    }

    /// The message and exit code of generation 3's fence refused as stale
    /// by a server whose exclusive mark is `mark`.
    fn stale_fence(mark: u64) -> (u8, String) {
        let sequencer: Sequencer = "v1;lock=orders/42;mode=exclusive;gen=3".parse().unwrap();
        let refused = Refused::Stale {
            lock: sequencer.lock().clone(),
            mode: sequencer.mode(),
            presented: sequencer.generation(),
            marks: palisade_client::Marks {
                exclusive: mark,
                shared: 0,
            },
            regression: false,
        };
        exit::describe(&refusal(&refused, &sequencer, "http://127.0.0.1:7411"))
    }

    #[test]
    fn a_stale_fence_names_the_recovery_command() {
        let (code, line) = stale_fence(9);
        assert_eq!(code, exit::STALE);
        assert!(line.contains("generation 3"), "{line}");
        assert!(line.contains("went backwards"), "{line}");
        assert!(
            line.contains("`palisade raise-floor orders/42 --server http://127.0.0.1:7411`"),
            "{line}"
        );
        assert!(line.contains("its counter was lost"), "{line}");
    }

    #[test]
    fn a_stale_fence_under_a_forged_maximum_does_not_blame_the_counter() {
        let (code, line) = stale_fence(u64::MAX);
        assert_eq!(code, exit::STALE);
        assert!(line.contains("forged or runaway"), "{line}");
        assert!(!line.contains("counter was lost"), "{line}");
        assert!(!line.contains("raise-floor"), "{line}");
    }
}
