//! `palisade put`, `get`, `del`, `fence` and `marks`: the resource server
//! from the shell, or with `--redis-fence` data kept in Redis
//! (`redis_data.rs`).
//!
//! Writes carry the sequencer from `--sequencer` or `PALISADE_SEQUENCER`,
//! which `palisade lock` sets for the command it runs, so
//! `palisade lock orders/42 -- palisade put orders/42 stock 7` needs no
//! plumbing. Refusals map to their own exit codes (see `exit.rs`): a stale
//! sequencer is 4, the other refusals 5, a missing key 3.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use palisade_client::{Client, ClientError, Marks, OpResult, Refused, Written};
use palisade_core::{LockName, Sequencer};
use palisade_wire::{JsonBytes, MarksAnswer, MarksBody, OpResultName};
use serde::Serialize;
use tokio::io::AsyncReadExt as _;

use crate::exit::{self, Failure};
use crate::redis_data::{Fenced, RedisFenceArg};
use palisade_lock_any::{cause_chain, root_cause};

/// The default resource server address (`palisade serve`'s default).
pub(crate) const DEFAULT_SERVER: &str = "http://127.0.0.1:7411";

/// Where the resource server is.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The resource server's base URL.
    #[arg(long, env = "PALISADE_SERVER", default_value = DEFAULT_SERVER, value_name = "URL")]
    server: String,

    /// How long to wait for the server's answer.
    #[arg(long, default_value = "30s", value_parser = palisade_core::parse_duration, value_name = "DURATION")]
    timeout: Duration,

    #[command(flatten)]
    auth: ServerAuth,

    /// Print the result as one JSON object on standard output.
    #[arg(long)]
    json: bool,
}

impl ServerArgs {
    fn client(&self) -> anyhow::Result<Client> {
        Ok(self.auth.client(&self.server, self.timeout)?)
    }
}

/// How to reach resource servers that require a token or a private CA;
/// shared by every command that talks to one.
#[derive(Debug, Default, Args)]
pub(crate) struct ServerAuth {
    /// Bearer token for servers that require one (`--tokens-file`).
    /// Prefer the environment variable: a flag shows in the process list.
    #[arg(
        long,
        env = "PALISADE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,

    /// CA certificate (PEM) to trust for `https://` servers, instead of
    /// the system's CA bundle.
    #[arg(long, env = "PALISADE_CA_CERT", value_name = "PEM")]
    ca_cert: Option<PathBuf>,
}

impl ServerAuth {
    /// A client for the server at `url` with this token and CA.
    pub(crate) fn client(
        &self,
        url: &str,
        timeout: Duration,
    ) -> Result<Client, palisade_client::ClientError> {
        let mut builder = Client::builder(url).timeout(timeout);
        if let Some(token) = &self.token {
            builder = builder.bearer_token(token);
        }
        if let Some(ca_cert) = &self.ca_cert {
            builder = builder.root_ca_file(ca_cert);
        }
        builder.build()
    }
}

/// The environment variable `palisade lock` sets for its command.
const SEQUENCER_ENV: &str = "PALISADE_SEQUENCER";

/// The sequencer flag of the commands that send one.
///
/// `--sequencer` is read by clap; `PALISADE_SEQUENCER` is read here, not
/// by clap, because the two mean different things. A flag is what the user
/// asked for: for another lock it is an error. The environment is
/// inherited: under `palisade lock a -- ...` it is `a`'s sequencer, and a
/// command touching lock `b` must neither send it nor be refused for it.
#[derive(Debug, Args)]
pub(crate) struct SequencerArg {
    /// The sequencer to send (its `v1;...` text form). Without it, the one
    /// in PALISADE_SEQUENCER (which `palisade lock` sets for its command)
    /// is used when it is for the lock addressed.
    #[arg(long, value_name = "SEQUENCER")]
    sequencer: Option<String>,

    /// `PALISADE_SEQUENCER`, read when the command runs.
    #[arg(skip = std::env::var(SEQUENCER_ENV).ok())]
    from_env: Option<String>,
}

/// Where a sequencer came from, for the error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Flag,
    Env,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Flag => "--sequencer",
            Origin::Env => SEQUENCER_ENV,
        }
    }
}

impl SequencerArg {
    /// The text given, and where: the flag wins over the environment. An
    /// empty `PALISADE_SEQUENCER` counts as unset.
    fn given(&self) -> Option<(&str, Origin)> {
        match (&self.sequencer, &self.from_env) {
            (Some(text), _) => Some((text, Origin::Flag)),
            (None, Some(text)) if !text.trim().is_empty() => Some((text, Origin::Env)),
            (None, _) => None,
        }
    }

    fn parse(text: &str, origin: Origin) -> anyhow::Result<Sequencer> {
        text.trim().parse().map_err(|error| {
            anyhow::anyhow!("malformed sequencer (from {}): {error}", origin.name())
        })
    }

    /// The sequencer to send to `lock`, if any. One from `--sequencer` must
    /// be for `lock`; one from the environment for another lock is left
    /// out (a read of another lock is a plain read).
    fn for_lock(&self, lock: &LockName) -> anyhow::Result<Option<Sequencer>> {
        let Some((text, origin)) = self.given() else {
            return Ok(None);
        };
        let sequencer = Self::parse(text, origin)?;
        if sequencer.lock() == lock {
            return Ok(Some(sequencer));
        }
        match origin {
            Origin::Flag => anyhow::bail!(
                "the sequencer is for lock `{}`, not `{lock}` (from --sequencer)",
                sequencer.lock()
            ),
            Origin::Env => Ok(None),
        }
    }

    /// The sequencer a write to `lock` needs.
    pub(crate) fn required_for(&self, lock: &LockName) -> anyhow::Result<Sequencer> {
        if let Some(sequencer) = self.for_lock(lock)? {
            return Ok(sequencer);
        }
        let hint = match self.given() {
            // `for_lock` only drops an environment sequencer of another
            // lock, and it has parsed already.
            Some((text, _)) => match Self::parse(text, Origin::Env) {
                Ok(other) => format!(
                    "{SEQUENCER_ENV} is for lock `{}`; pass --sequencer, or run under `palisade lock {lock} -- ...`",
                    other.lock()
                ),
                Err(error) => error.to_string(),
            },
            None => format!(
                "pass --sequencer, set {SEQUENCER_ENV}, or run under `palisade lock {lock} -- ...`"
            ),
        };
        anyhow::bail!("a write needs a sequencer for lock `{lock}`: {hint}")
    }
}

/// Arguments of `palisade put`.
#[derive(Debug, Args)]
#[command(after_help = PUT_EXAMPLES)]
pub(crate) struct PutArgs {
    /// The lock whose keyspace holds the key.
    lock: String,
    /// The key (any bytes).
    key: OsString,
    /// The value (any bytes); `-` reads it from standard input.
    #[arg(required_unless_present = "stdin", conflicts_with = "stdin")]
    value: Option<OsString>,
    /// Read the value from standard input.
    #[arg(long)]
    stdin: bool,
    #[command(flatten)]
    target: WriteTarget,
}

/// Where `put` and `del` write, and under what: the sequencer, an
/// idempotency key, and the resource server or a Redis fence.
#[derive(Debug, Args)]
pub(crate) struct WriteTarget {
    #[command(flatten)]
    sequencer: SequencerArg,
    /// Idempotency key: a retry with the same key is answered with the
    /// first outcome instead of being applied twice (resource server only).
    #[arg(long, value_name = "KEY", conflicts_with = "redis_fence")]
    idempotency_key: Option<String>,
    #[command(flatten)]
    redis: RedisFenceArg,
    #[command(flatten)]
    server: ServerArgs,
}

/// What `put` or `del` does to its key.
pub(crate) enum Change {
    /// Stores this value.
    Put(Vec<u8>),
    /// Deletes the key.
    Delete,
}

const PUT_EXAMPLES: &str = "\
Examples:
  palisade lock orders/42 -- palisade put orders/42 stock 7
  palisade put --sequencer 'v1;lock=orders/42;mode=exclusive;gen=33' orders/42 stock 7
  tar c data | palisade put orders/42 backup.tar -
  palisade lock orders/42 -- palisade put orders/42 stock 7 --redis-fence redis://127.0.0.1:6379

Exit codes: 0 written; 4 refused, stale sequencer (a newer holder, or a regression);
5 refused otherwise (shared sequencer, live check says not held, idempotency
key reused); 1 other errors (server unreachable, malformed sequencer).";

/// Arguments of `palisade get`.
#[derive(Debug, Args)]
#[command(after_help = GET_EXAMPLES)]
pub(crate) struct GetArgs {
    /// The lock whose keyspace holds the key.
    lock: String,
    /// The key (any bytes).
    key: OsString,
    #[command(flatten)]
    sequencer: SequencerArg,
    /// Read without a sequencer, even when PALISADE_SEQUENCER is one for
    /// this lock.
    #[arg(long, conflicts_with = "sequencer")]
    no_sequencer: bool,
    #[command(flatten)]
    redis: RedisFenceArg,
    #[command(flatten)]
    server: ServerArgs,
}

const GET_EXAMPLES: &str = "\
The value is written to standard output as raw bytes, nothing added. With a
sequencer (shared or exclusive) the read is fenced: it is checked against the
marks and raises them, as a write would.

Examples:
  palisade get orders/42 stock
  palisade lock --mode shared orders/42 -- palisade get orders/42 stock
  palisade get orders/42 stock --redis-fence redis://127.0.0.1:6379

Exit codes: 0 found; 3 no such key; 4 refused, stale sequencer; 5 refused
otherwise; 1 other errors.";

/// Arguments of `palisade del`.
#[derive(Debug, Args)]
#[command(after_help = DEL_EXAMPLES)]
pub(crate) struct DelArgs {
    /// The lock whose keyspace holds the key.
    lock: String,
    /// The key (any bytes).
    key: OsString,
    #[command(flatten)]
    target: WriteTarget,
}

const DEL_EXAMPLES: &str = "\
Deleting a key that does not exist succeeds (\"absent\"), so a retried delete
does not fail.

Examples:
  palisade lock orders/42 -- palisade del orders/42 stock
  palisade lock orders/42 -- palisade del orders/42 stock --redis-fence redis://127.0.0.1:6379

Exit codes: 0 deleted or absent; 4 refused, stale sequencer; 5 refused
otherwise; 1 other errors.";

/// Arguments of `palisade marks`.
#[derive(Debug, Args)]
#[command(after_help = MARKS_EXAMPLES)]
pub(crate) struct MarksArgs {
    /// The lock.
    lock: String,
    #[command(flatten)]
    redis: RedisFenceArg,
    #[command(flatten)]
    server: ServerArgs,
}

const MARKS_EXAMPLES: &str = "\
The marks are the highest generations the server has honoured for the lock:
an exclusive request needs a generation of at least max(exclusive, shared), a
shared one at least exclusive. A lock never seen has marks 0 and 0.

Example:
  palisade marks orders/42
  palisade marks --json orders/42
  palisade marks orders/42 --redis-fence redis://127.0.0.1:6379";

/// Arguments of `palisade fence`.
#[derive(Debug, Args)]
#[command(after_help = FENCE_EXAMPLES)]
pub(crate) struct FenceArgs {
    /// The lock.
    lock: String,
    #[command(flatten)]
    sequencer: SequencerArg,
    #[command(flatten)]
    redis: RedisFenceArg,
    #[command(flatten)]
    server: ServerArgs,
}

const FENCE_EXAMPLES: &str = "\
Raises the lock's marks to the sequencer's generation without writing
anything, so an older holder paused past its lease is refused from now on,
even before this holder writes. `palisade lock` does this at the resource
server by itself; data in Redis is fenced with this command.

Examples:
  palisade lock orders/42 -- sh -c 'palisade fence orders/42 --redis-fence \"$REDIS\" && ./work'
  palisade fence orders/42 --sequencer 'v1;lock=orders/42;mode=exclusive;gen=33'

Exit codes: 0 fenced; 4 refused, stale sequencer; 5 refused otherwise; 1
other errors.";

pub(crate) fn lock_name(text: &str) -> anyhow::Result<LockName> {
    LockName::new(text).map_err(|error| anyhow::anyhow!("invalid lock name `{text}`: {error}"))
}

/// Runs `palisade put`.
pub(crate) async fn put(args: PutArgs) -> anyhow::Result<()> {
    let lock = lock_name(&args.lock)?;
    let sequencer = args.target.sequencer.required_for(&lock)?;
    let value = read_value(args.value.as_ref()).await?;
    let change = Change::Put(value);
    args.target
        .write(&sequencer, args.key.as_bytes(), change)
        .await
}

/// The value argument's bytes, or standard input's for `-` or none
/// (`--stdin`).
pub(crate) async fn read_value(value: Option<&OsString>) -> anyhow::Result<Vec<u8>> {
    match value {
        Some(value) if value.as_bytes() != b"-" => Ok(value.as_bytes().to_vec()),
        _ => {
            let mut value = Vec::new();
            tokio::io::stdin()
                .read_to_end(&mut value)
                .await
                .map_err(|error| {
                    anyhow::anyhow!("cannot read the value from standard input: {error}")
                })?;
            Ok(value)
        }
    }
}

/// Runs `palisade del`.
pub(crate) async fn del(args: DelArgs) -> anyhow::Result<()> {
    let lock = lock_name(&args.lock)?;
    let sequencer = args.target.sequencer.required_for(&lock)?;
    let change = Change::Delete;
    args.target
        .write(&sequencer, args.key.as_bytes(), change)
        .await
}

impl WriteTarget {
    /// Writes `change` to `key` under `sequencer`, through the Redis fence
    /// if one is named, else on the resource server, and reports it.
    async fn write(&self, sequencer: &Sequencer, key: &[u8], change: Change) -> anyhow::Result<()> {
        let lock = sequencer.lock();
        if let Some(url) = &self.redis.redis_fence {
            let redis = Fenced::connect(url, self.server.timeout).await?;
            let written = redis.write(sequencer, key, change).await?;
            return report_written(&self.server, lock, key, &written);
        }
        let client = self.server.client()?;
        let idempotency_key = self.idempotency_key.as_deref();
        let outcome = match change {
            Change::Put(value) => client.put(sequencer, key, value, idempotency_key).await,
            Change::Delete => client.delete(sequencer, key, idempotency_key).await,
        };
        let outcome = outcome.map_err(|error| server_error(&error, &self.server.server))?;
        let written = outcome.map_err(|refused| refusal(&refused, lock))?;
        report_written(&self.server, lock, key, &written)
    }
}

/// Runs `palisade get`.
pub(crate) async fn get(args: GetArgs) -> anyhow::Result<()> {
    let lock = lock_name(&args.lock)?;
    let sequencer = if args.no_sequencer {
        None
    } else {
        args.sequencer.for_lock(&lock)?
    };
    let key = args.key.as_bytes();
    let read = match &args.redis.redis_fence {
        Some(url) => {
            let redis = Fenced::connect(url, args.server.timeout).await?;
            redis.get(&lock, key, sequencer.as_ref()).await?
        }
        None => args
            .server
            .client()?
            .get(&lock, key, sequencer.as_ref())
            .await
            .map_err(|error| server_error(&error, &args.server.server))?
            .map_err(|refused| refusal(&refused, &lock))?,
    };
    let Some(value) = read.value else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "key `{}` not found under lock `{lock}` ({})",
                key.escape_ascii(),
                marks_text(read.marks)
            ),
        )
        .into());
    };
    let mut stdout = std::io::stdout().lock();
    if args.server.json {
        let answer = ReadOutput {
            lock: lock.as_str(),
            key: key.into(),
            value: value.into(),
            marks: read.marks.into(),
        };
        writeln!(stdout, "{}", serde_json::to_string(&answer)?)?;
    } else {
        stdout.write_all(&value)?;
    }
    stdout.flush()?;
    Ok(())
}

/// Runs `palisade fence`.
pub(crate) async fn fence(args: FenceArgs) -> anyhow::Result<()> {
    let lock = lock_name(&args.lock)?;
    let sequencer = args.sequencer.required_for(&lock)?;
    let (marks, place) = match &args.redis.redis_fence {
        Some(url) => {
            let redis = Fenced::connect(url, args.server.timeout).await?;
            (redis.admit(&sequencer).await?, redis.shown().to_owned())
        }
        None => {
            let marks = args
                .server
                .client()?
                .fence(&sequencer)
                .await
                .map_err(|error| server_error(&error, &args.server.server))?
                .map_err(|refused| refusal(&refused, &lock))?;
            (marks, args.server.server.clone())
        }
    };
    let line = format!(
        "fenced lock `{lock}` at {} generation {} on {place} ({})",
        sequencer.mode(),
        sequencer.generation(),
        marks_text(marks)
    );
    print_marks(args.server.json, &lock, marks, &line)
}

/// Runs `palisade marks`.
pub(crate) async fn marks(args: MarksArgs) -> anyhow::Result<()> {
    let lock = lock_name(&args.lock)?;
    let marks = match &args.redis.redis_fence {
        Some(url) => {
            Fenced::connect(url, args.server.timeout)
                .await?
                .marks(&lock)
                .await?
        }
        None => args
            .server
            .client()?
            .marks(&lock)
            .await
            .map_err(|error| server_error(&error, &args.server.server))?,
    };
    let line = format!(
        "lock `{lock}`: exclusive {}, shared {}",
        marks.exclusive, marks.shared
    );
    print_marks(args.server.json, &lock, marks, &line)
}

/// The marks as the API's JSON answer, or `line`.
fn print_marks(json: bool, lock: &LockName, marks: Marks, line: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    if json {
        let answer = MarksAnswer {
            lock: lock.as_str().to_owned(),
            marks: marks.into(),
        };
        writeln!(stdout, "{}", serde_json::to_string(&answer)?)?;
    } else {
        writeln!(stdout, "{line}")?;
    }
    Ok(())
}

fn report_written(
    server: &ServerArgs,
    lock: &LockName,
    key: &[u8],
    written: &Written,
) -> anyhow::Result<()> {
    let first = written.results.first().copied();
    let result = first.map_or("done", result_name);
    let mut stdout = std::io::stdout().lock();
    if server.json {
        let answer = WriteOutput {
            lock: lock.as_str(),
            key: key.into(),
            result: first.map(OpResultName::from),
            marks: written.marks.into(),
            commit_seq: written.commit_seq,
            replayed: written.replayed,
        };
        writeln!(stdout, "{}", serde_json::to_string(&answer)?)?;
    } else {
        let replayed = if written.replayed {
            "; replayed: an earlier request with this idempotency key was applied"
        } else {
            ""
        };
        writeln!(
            stdout,
            "{result} `{}` under lock `{lock}` ({}){replayed}",
            key.escape_ascii(),
            marks_text(written.marks)
        )?;
    }
    Ok(())
}

fn result_name(result: OpResult) -> &'static str {
    result.as_str()
}

pub(crate) fn marks_text(marks: Marks) -> String {
    format!(
        "marks: exclusive {}, shared {}",
        marks.exclusive, marks.shared
    )
}

/// `palisade get --json`: the API's bytes and marks (`palisade-wire`).
#[derive(Serialize)]
struct ReadOutput<'a> {
    lock: &'a str,
    key: JsonBytes,
    value: JsonBytes,
    marks: MarksBody,
}

/// `palisade put|del --json`: the write's first result and the API's
/// marks (`palisade-wire`).
#[derive(Serialize)]
struct WriteOutput<'a> {
    lock: &'a str,
    key: JsonBytes,
    result: Option<OpResultName>,
    marks: MarksBody,
    commit_seq: u64,
    replayed: bool,
}

/// A refusal: one line with everything needed to understand it, and its
/// exit code. Nothing was changed on the server.
pub(crate) fn refusal(refused: &Refused, lock: &LockName) -> anyhow::Error {
    let (code, message) = match refused {
        Refused::Stale {
            mode,
            presented,
            marks,
            regression,
            ..
        } => (
            exit::STALE,
            stale_message(
                lock,
                *mode,
                *presented,
                marks.required(*mode),
                *marks,
                *regression,
            ),
        ),
        Refused::NotHeld { presented, .. } => (
            exit::REFUSED,
            format!(
                "refused (409 not_held): the lock service says generation {presented} no longer holds lock `{lock}`; nothing was changed"
            ),
        ),
        Refused::SharedOnWrite { .. } => (
            exit::REFUSED,
            format!(
                "refused (403 shared_on_write): writes under lock `{lock}` need an exclusive sequencer; nothing was changed"
            ),
        ),
        other => (
            exit::REFUSED,
            format!(
                "refused ({} {}): {other}; nothing was changed",
                other.http_status(),
                other.reason()
            ),
        ),
    };
    tracing::debug!(lock = %lock, code = refused.reason(), "request refused");
    Failure::new(code, message).into()
}

/// The stale refusal as it is known: a regression when the server's live
/// check says the holder still holds, the two possible causes otherwise;
/// both with the way out.
fn stale_message(
    lock: &LockName,
    mode: palisade_core::Mode,
    presented: palisade_core::Generation,
    required: u64,
    marks: Marks,
    regression: bool,
) -> String {
    let recovery = lock.raise_floor_command();
    let marks = marks_text(marks);
    if regression {
        format!(
            "refused (409 stale, regression): lock `{lock}`: the lock service still grants {mode} generation {presented}, yet the resource server has honoured up to {required} ({marks}): the lock service's generations went backwards (lost counter, wiped or restored data); recover with `{recovery}` and the same lock service flags, then take the lock again; nothing was changed"
        )
    } else {
        format!(
            "refused (409 stale): the sequencer for lock `{lock}` is stale: {mode} generation {presented} is below the required {required} ({marks}); either a newer holder has been honoured, or the lock service's generations are behind the server's marks (lost counter, wiped or restored data; if no newer holder exists, recover with `{recovery}`); nothing was changed"
        )
    }
}

/// A failure of the request itself, as one line.
pub(crate) fn server_error(error: &ClientError, server: &str) -> anyhow::Error {
    match error {
        ClientError::Connect { .. } => anyhow::anyhow!(
            "cannot connect to the resource server at {server}: {}",
            root_cause(error)
        ),
        ClientError::Timeout { .. } => anyhow::anyhow!(
            "the resource server at {server} did not answer in time (the request may or may not have been applied; retry with the same --idempotency-key)"
        ),
        other => anyhow::anyhow!("{}", cause_chain(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use palisade_core::Mode;

    #[test]
    fn json_output_writes_bytes_and_marks_as_the_http_api_does() {
        let output = ReadOutput {
            lock: "a",
            key: (&[0xff, 0x00][..]).into(),
            value: (&b"hello"[..]).into(),
            marks: Marks {
                exclusive: 3,
                shared: 0,
            }
            .into(),
        };
        assert_eq!(
            serde_json::to_string(&output).unwrap(),
            r#"{"lock":"a","key":{"base64":"/wA="},"value":"hello","marks":{"exclusive":3,"shared":0}}"#
        );
    }

    /// `--sequencer text`, with nothing in the environment.
    fn flag(text: &str) -> SequencerArg {
        SequencerArg {
            sequencer: Some(text.to_owned()),
            from_env: None,
        }
    }

    #[test]
    fn a_sequencer_for_another_lock_is_refused_before_sending() {
        let arg = flag("v1;lock=a;mode=exclusive;gen=3");
        let error = arg.for_lock(&LockName::new("b").unwrap()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("is for lock `a`, not `b` (from --sequencer)"),
            "{error}"
        );
        let sequencer = arg.for_lock(&LockName::new("a").unwrap()).unwrap().unwrap();
        assert_eq!(sequencer.generation().get(), 3);
    }

    #[test]
    fn a_sequencer_from_the_environment_applies_to_its_own_lock_only() {
        let arg = SequencerArg {
            sequencer: None,
            from_env: Some("v1;lock=a;mode=exclusive;gen=3".to_owned()),
        };
        let (a, b) = (LockName::new("a").unwrap(), LockName::new("b").unwrap());
        assert_eq!(arg.for_lock(&a).unwrap().unwrap().generation().get(), 3);
        assert!(arg.for_lock(&b).unwrap().is_none(), "a read of b is plain");
        let error = arg.required_for(&b).unwrap_err().to_string();
        assert_eq!(
            error,
            "a write needs a sequencer for lock `b`: PALISADE_SEQUENCER is for lock `a`; \
             pass --sequencer, or run under `palisade lock b -- ...`"
        );
        let with_flag = SequencerArg {
            sequencer: Some("v1;lock=b;mode=exclusive;gen=7".to_owned()),
            ..arg
        };
        assert_eq!(with_flag.required_for(&b).unwrap().generation().get(), 7);
    }

    #[test]
    fn a_malformed_sequencer_says_why() {
        let arg = flag("v2;lock=a");
        let error = arg.for_lock(&LockName::new("a").unwrap()).unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("malformed sequencer"), "{text}");
        assert!(text.contains("v1"), "{text}");
    }

    #[test]
    fn a_stale_refusal_gives_both_generations() {
        let refused = Refused::Stale {
            lock: LockName::new("a").unwrap(),
            mode: Mode::Exclusive,
            presented: palisade_core::Generation::new(33).unwrap(),
            marks: Marks {
                exclusive: 34,
                shared: 0,
            },
            regression: false,
        };
        let error = refusal(&refused, &LockName::new("a").unwrap());
        let (code, line) = exit::describe(&error);
        assert_eq!(code, exit::STALE);
        assert!(line.contains("generation 33"), "{line}");
        assert!(line.contains("marks: exclusive 34, shared 0"), "{line}");
    }

    #[test]
    fn the_token_and_ca_flags_reach_the_client() {
        let args = |server: &str, token: Option<&str>, ca_cert: Option<&str>| ServerArgs {
            server: server.to_owned(),
            timeout: Duration::from_secs(1),
            auth: ServerAuth {
                token: token.map(str::to_owned),
                ca_cert: ca_cert.map(PathBuf::from),
            },
            json: false,
        };
        let token = "orders-token-0123456789";
        let client = args("http://127.0.0.1:7411", Some(token), None)
            .client()
            .unwrap();
        assert!(
            !format!("{client:?}").contains(token),
            "the token never shows"
        );
        let error = args("http://127.0.0.1:7411", Some("not a token"), None)
            .client()
            .unwrap_err();
        assert!(error.to_string().contains("bearer token"), "{error}");
        let error = args("https://127.0.0.1:7411", None, Some("/nonexistent/ca.pem"))
            .client()
            .unwrap_err();
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
