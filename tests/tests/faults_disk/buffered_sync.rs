//! Buffered mode's interval sync under libfiu: the resource server with
//! `--durability buffered` really fsyncs every period, and fail-stops when
//! those syncs fail, as flushed mode does after a failed group sync.

use std::time::Duration;

use anyhow::Context as _;
use palisade::client::{Client, ClientError};
use palisade::{Generation, LockName, Mode, Sequencer};
use palisade_tests::fault::{FaultRun, ResourceServerOptions, ResourceServerProcess};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::fiu::Fiu;

/// The interval sync's period: short, so the test waits little.
const PERIOD_MS: &str = "100";
/// The longest wait for anything the interval sync does (many periods, for
/// a loaded 2-core machine).
const SYNC_WAIT: Duration = Duration::from_secs(30);

/// `palisade_store_background_syncs_total`, read from `/metrics` over a
/// plain HTTP/1.0 request.
async fn background_syncs(server: &ResourceServerProcess) -> anyhow::Result<u64> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port())).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    text.lines()
        .find_map(|line| line.strip_prefix("palisade_store_background_syncs_total "))
        .context("no palisade_store_background_syncs_total in /metrics")?
        .trim()
        .parse()
        .context("the counter is not a number")
}

/// Polls (every 20 ms, at most [`SYNC_WAIT`]) until `done` holds: the
/// interval sync runs inside the server, there is no event to wait on.
async fn eventually<F, Fut>(what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + SYNC_WAIT;
    while !done().await? {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {SYNC_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn fail_stopped(client: &Client) -> anyhow::Result<bool> {
    Ok(matches!(
        client.health().await,
        Err(ClientError::Unavailable { .. })
    ))
}

/// A buffered server acknowledges a write; two interval syncs later it is
/// on disk. Then every `fsync`/`fdatasync` fails (EIO): the server must
/// fail-stop by itself (no request needs to arrive), refuse a write with
/// 503, and stay stopped after the disk heals. After a restart the write
/// synced before the failure is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_server_fail_stops_when_its_interval_sync_fails() -> anyhow::Result<()> {
    Fiu::require();
    let binaries = palisade_tests::fault_binaries!();
    let run = FaultRun::new("buffered-sync")?;
    let fiu = Fiu::new(run.dir());
    let mut server = ResourceServerProcess::start(
        &binaries,
        &run,
        ResourceServerOptions::default()
            .command_prefix(fiu.command_prefix())
            .arg("--durability")
            .arg("buffered")
            .arg("--buffered-flush-ms")
            .arg(PERIOD_MS),
    )?;
    let client = server.client(Duration::from_secs(10))?;
    let lock = LockName::new("buffered/a")?;
    let sequencer = |generation| {
        Sequencer::new(
            lock.clone(),
            Mode::Exclusive,
            Generation::new(generation).unwrap(),
        )
    };

    client
        .put(&sequencer(1), b"k", "synced", None)
        .await?
        .expect("the first write is accepted");
    let acknowledged_at = background_syncs(&server).await?;
    eventually("two interval syncs after the write", || async {
        Ok(background_syncs(&server).await? >= acknowledged_at + 2)
    })
    .await?;

    let pid = server.pid().expect("the server runs");
    fiu.fail_syncs(pid, 5)?;
    eventually("the server fail-stops on its own", || fail_stopped(&client)).await?;
    let refused = client.put(&sequencer(2), b"k", "after", None).await;
    assert!(
        matches!(&refused, Err(ClientError::Unavailable { message, .. }) if message.contains("Input/output error")),
        "a write to a server whose sync failed was answered {refused:?}"
    );
    fiu.heal_syncs(pid)?;
    assert!(
        fail_stopped(&client).await?,
        "the server resumed by itself after its sync had failed"
    );

    server.restart()?;
    let client = server.client(Duration::from_secs(10))?;
    let read = client.get(&lock, b"k", None).await?.expect("a plain read");
    assert_eq!(read.value.as_deref(), Some(&b"synced"[..]));
    assert_eq!(client.marks(&lock).await?.exclusive, 1);
    server.stop()?;
    Ok(())
}
