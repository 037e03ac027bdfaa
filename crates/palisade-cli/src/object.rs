//! `palisade object put|get|rm`: objects in S3-compatible storage, fenced
//! by `palisade-fence-object` with the lock's sequencer.
//!
//! Every command opens the fence first, which runs the crate's start-up
//! probe: a store that ignores conditional writes is refused with the
//! crate's error before anything is written. A write refused as stale
//! exits 4 and changes nothing, as a stale write to the resource server
//! does. The secret key and session token never reach a message: the
//! crate's `S3Config` masks them, and this module prints only the store's
//! name as the crate shows it.

use std::ffi::OsString;
use std::io::Write as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use palisade_core::Refused;
use palisade_fence_object::{FenceError, ObjectFence, Path, S3Config};

use crate::data::{SequencerArg, lock_name, read_value, refusal};
use crate::exit::{self, Failure};

/// Arguments of `palisade object`.
#[derive(Debug, Args)]
#[command(after_help = OBJECT_EXAMPLES)]
pub(crate) struct ObjectArgs {
    #[command(subcommand)]
    command: ObjectCommand,
}

#[derive(Debug, Subcommand)]
enum ObjectCommand {
    /// Write an object, fenced by the lock's sequencer.
    Put(PutArgs),
    /// Read an object (raw bytes to standard output).
    Get(GetArgs),
    /// Delete an object, fenced by the lock's sequencer (a tombstone that
    /// keeps the generation).
    Rm(RmArgs),
}

const OBJECT_EXAMPLES: &str = "\
Examples:
  export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
  palisade lock tables/orders -- palisade object put --location s3://tables/orders --endpoint http://127.0.0.1:9000 tables/orders 42.json '{\"stock\": 7}'
  palisade object get --location s3://tables/orders --endpoint http://127.0.0.1:9000 42.json

Exit codes: 0 done; 3 no such object (get); 4 refused, stale sequencer (a newer
holder fenced the lock or wrote the object); 5 refused otherwise; 1 other
errors (the store ignores conditional writes, unreachable, bad credentials).";

/// Where the objects are, and how to reach them.
#[derive(Debug, Args)]
struct StoreArgs {
    /// The bucket and prefix: s3://bucket or s3://bucket/prefix.
    #[arg(long, env = "PALISADE_OBJECT_LOCATION", value_name = "S3_URL")]
    location: String,

    /// The S3 endpoint, e.g. http://127.0.0.1:9000 for a compatible store.
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    endpoint: Option<String>,

    /// The region.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,

    /// The access key id; with --secret-access-key.
    #[arg(long, env = "AWS_ACCESS_KEY_ID", value_name = "ID")]
    access_key_id: Option<String>,

    /// The secret access key. Prefer the environment variable: a flag
    /// shows in the process list.
    #[arg(
        long,
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    secret_access_key: Option<String>,

    /// A session token, with temporary credentials.
    #[arg(
        long,
        env = "AWS_SESSION_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    session_token: Option<String>,

    /// How long one request may take before its outcome is in doubt (and
    /// read back).
    #[arg(long, default_value = "30s", value_parser = palisade_core::parse_duration, value_name = "DURATION")]
    timeout: Duration,
}

impl StoreArgs {
    /// The configuration, or why it cannot be honoured.
    fn config(&self) -> anyhow::Result<S3Config> {
        let mut config = S3Config::parse(&self.location)?
            .with_region(&self.region)
            .with_timeout(self.timeout);
        if let Some(endpoint) = &self.endpoint {
            config = config.with_endpoint(endpoint);
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => config = config.with_credentials(id, secret),
            (None, None) => {}
            (Some(_), None) => anyhow::bail!(
                "an access key id without its secret: set AWS_SECRET_ACCESS_KEY (or --secret-access-key)"
            ),
            (None, Some(_)) => anyhow::bail!(
                "a secret access key without its id: set AWS_ACCESS_KEY_ID (or --access-key-id)"
            ),
        }
        if let Some(token) = &self.session_token {
            if self.access_key_id.is_none() {
                anyhow::bail!("a session token goes with an access key id and secret");
            }
            config = config.with_session_token(token);
        }
        Ok(config)
    }

    /// The fence over the store, after the probe.
    async fn open(&self) -> anyhow::Result<ObjectFence> {
        Ok(self.config()?.open().await?)
    }
}

/// An object path inside the location's prefix.
fn object_path(text: &str) -> anyhow::Result<Path> {
    Path::parse(text).map_err(|error| anyhow::anyhow!("invalid object path `{text}`: {error}"))
}

/// Arguments of `palisade object put`.
#[derive(Debug, Args)]
struct PutArgs {
    /// The lock guarding the object.
    lock: String,
    /// The object's path under the location.
    object: String,
    /// The value (any bytes); `-` reads it from standard input.
    #[arg(required_unless_present = "stdin", conflicts_with = "stdin")]
    value: Option<OsString>,
    /// Read the value from standard input.
    #[arg(long)]
    stdin: bool,
    #[command(flatten)]
    sequencer: SequencerArg,
    #[command(flatten)]
    store: StoreArgs,
}

/// Arguments of `palisade object get`.
#[derive(Debug, Args)]
struct GetArgs {
    /// The object's path under the location.
    object: String,
    #[command(flatten)]
    store: StoreArgs,
}

/// Arguments of `palisade object rm`.
#[derive(Debug, Args)]
struct RmArgs {
    /// The lock guarding the object.
    lock: String,
    /// The object's path under the location.
    object: String,
    #[command(flatten)]
    sequencer: SequencerArg,
    #[command(flatten)]
    store: StoreArgs,
}

/// Runs `palisade object ...`.
pub(crate) async fn run(args: ObjectArgs) -> anyhow::Result<()> {
    match args.command {
        ObjectCommand::Put(args) => {
            let lock = lock_name(&args.lock)?;
            let sequencer = args.sequencer.required_for(&lock)?;
            let path = object_path(&args.object)?;
            let value = read_value(args.value.as_ref()).await?;
            let fence = args.store.open().await?;
            let written = fenced(fence.put(&sequencer, &path, value).await, &lock)?;
            println!(
                "wrote `{path}` in {} under lock `{lock}` at generation {} (version {})",
                fence.name(),
                written.generation,
                written.version
            );
        }
        ObjectCommand::Rm(args) => {
            let lock = lock_name(&args.lock)?;
            let sequencer = args.sequencer.required_for(&lock)?;
            let path = object_path(&args.object)?;
            let fence = args.store.open().await?;
            let written = fenced(fence.delete(&sequencer, &path).await, &lock)?;
            println!(
                "deleted `{path}` in {} under lock `{lock}` at generation {} (version {})",
                fence.name(),
                written.generation,
                written.version
            );
        }
        ObjectCommand::Get(args) => {
            let path = object_path(&args.object)?;
            let fence = args.store.open().await?;
            let Some(object) = fence.get(&path).await? else {
                return Err(Failure::new(
                    exit::NOT_FOUND,
                    format!("object `{path}` not found in {}", fence.name()),
                )
                .into());
            };
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&object.bytes)?;
            stdout.flush()?;
        }
    }
    Ok(())
}

/// A fenced write's outcome: landed, refused (exit 4 when stale), or failed.
fn fenced<T>(
    outcome: Result<Result<T, Refused>, FenceError>,
    lock: &palisade_core::LockName,
) -> anyhow::Result<T> {
    outcome?.map_err(|refused| refusal(&refused, lock))
}
