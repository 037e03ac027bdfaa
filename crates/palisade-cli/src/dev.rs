//! `palisade dev`: a throw-away lock service to try the command line with,
//! nothing installed or started by hand.
//!
//! Starts a local etcd (or Redis) on a free loopback port with its data in
//! a temporary directory, and either prints the environment that points
//! `palisade` at it and waits for Ctrl-C, or runs a command with that
//! environment set (`palisade dev -- bash`). Either way the service is
//! stopped (SIGTERM, then SIGKILL) and its directory removed on the way
//! out; it is started with `kill_on_drop`, so it never outlives us.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::child::Signals;
use crate::exit;

/// Which service to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DevService {
    /// etcd (Debian package `etcd-server`).
    Etcd,
    /// Redis (Debian package `redis-server`).
    Redis,
}

/// Arguments of `palisade dev`.
#[derive(Debug, Args)]
#[command(after_help = DEV_EXAMPLES)]
pub(crate) struct DevArgs {
    /// The lock service to start.
    #[arg(long, value_enum, default_value_t = DevService::Etcd)]
    service: DevService,

    /// A command to run with the environment set (`bash` for a shell); the
    /// service stops when it exits, and its exit code is ours. Without
    /// one: print the environment and wait for Ctrl-C.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

const DEV_EXAMPLES: &str = "\
Examples:
  palisade dev -- bash                 a shell where `palisade lock` uses a fresh local etcd
  palisade dev --service redis         print the environment for a local Redis; Ctrl-C stops it";

/// How long the service may take to accept connections.
const READY_WAIT: Duration = Duration::from_secs(15);
/// How long a stopped service gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub(crate) async fn run(args: DevArgs) -> anyhow::Result<u8> {
    let dir = tempfile::Builder::new()
        .prefix("palisade-dev-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let mut signals = Signals::install()?;
    let (mut service, address, env) = start(args.service, dir.path()).await?;
    let code = tokio::select! {
        ready = ready(&mut service, address) => match ready {
            Ok(()) => serve(&args, &mut service, &env, address, &mut signals).await,
            Err(error) => Err(error),
        },
        _ = signals.recv() => Ok(exit::by_signal(nix::sys::signal::Signal::SIGINT as i32)),
    };
    stop(&mut service).await;
    drop(dir);
    code
}

/// A free loopback port: bound, read, released.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("cannot find a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// Spawns the service; returns it, its client address, and the environment
/// that points `palisade` at it.
async fn start(
    which: DevService,
    dir: &std::path::Path,
) -> anyhow::Result<(Child, SocketAddr, Vec<(&'static str, String)>)> {
    let port = free_port()?;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let (program, package, mut command, env) = match which {
        DevService::Etcd => {
            let peer = free_port()?;
            let mut command = Command::new("etcd");
            command
                .arg("--name=palisade-dev")
                .arg(format!("--data-dir={}", dir.join("etcd").display()))
                .arg(format!("--listen-client-urls=http://{address}"))
                .arg(format!("--advertise-client-urls=http://{address}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!(
                    "--initial-cluster=palisade-dev=http://127.0.0.1:{peer}"
                ))
                .arg("--log-level=error");
            let env = vec![
                ("PALISADE_BACKEND", "etcd".to_owned()),
                ("PALISADE_ETCD_ENDPOINTS", address.to_string()),
            ];
            ("etcd", "etcd-server", command, env)
        }
        DevService::Redis => {
            let mut command = Command::new("redis-server");
            command
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .arg("--dir")
                .arg(dir)
                .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"]);
            let env = vec![
                ("PALISADE_BACKEND", "redis".to_owned()),
                ("PALISADE_REDIS_URL", format!("redis://{address}")),
            ];
            ("redis-server", "redis-server", command, env)
        }
    };
    // Its chatter would mix with the command's output; its errors show
    // when it fails to start (`ready`).
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!(
                "`{program}` is not installed: install it (Debian: `apt-get install {package}`), or point palisade at a running service with the PALISADE_* variables"
            )
        } else {
            anyhow::anyhow!("cannot start `{program}`: {error}")
        }
    })?;
    Ok((child, address, env))
}

/// Waits until the service accepts connections, or fails if it exits first
/// or takes longer than [`READY_WAIT`].
async fn ready(service: &mut Child, address: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_WAIT;
    loop {
        if let Some(status) = service.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut pipe) = service.stderr.take() {
                use tokio::io::AsyncReadExt as _;
                let _ = pipe.read_to_string(&mut stderr).await;
            }
            let last = stderr.lines().last().unwrap_or("no output");
            anyhow::bail!("the lock service exited at start ({status}): {last}");
        }
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the lock service did not accept connections on {address} within {}",
                palisade_core::format_duration(READY_WAIT)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs the command with `env`, or prints `env` and waits for a signal.
async fn serve(
    args: &DevArgs,
    service: &mut Child,
    env: &[(&'static str, String)],
    address: SocketAddr,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    let name = match args.service {
        DevService::Etcd => "etcd",
        DevService::Redis => "Redis",
    };
    let Some((program, rest)) = args.command.split_first() else {
        for (key, value) in env {
            println!("export {key}={value}");
        }
        say!(
            "palisade: {name} on {address} (pid {}); the lines above point palisade at it. Ctrl-C stops it.",
            service.id().unwrap_or_default()
        );
        return tokio::select! {
            status = service.wait() => Err(anyhow::anyhow!("{name} exited by itself ({})", status?)),
            signal = signals.recv() => Ok(exit::by_signal(signal as i32)),
        };
    };
    say!(
        "palisade: {name} on {address}; running the command with {}",
        env.iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut command = Command::new(program);
    command
        .args(rest)
        .envs(env.iter().map(|(key, value)| (key, value)));
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    // The command shares our terminal: Ctrl-C reaches it too, and we wait
    // for it to end rather than leave it without its service.
    loop {
        tokio::select! {
            status = child.wait() => return Ok(crate::child::exit_code(status?)),
            _ = signals.recv() => {}
        }
    }
}

/// SIGTERM, then SIGKILL after [`STOP_GRACE`].
async fn stop(service: &mut Child) {
    if let Some(pid) = service.id() {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(STOP_GRACE, service.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = service.kill().await;
}
