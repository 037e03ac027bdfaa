//! What every CLI test needs: the built `palisade` binary with a clean
//! environment, a resource server (`palisade serve` on a free port), real
//! lock services from the testkit, and assertions on exit codes and on the
//! one-line error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use palisade_core::{LockName, Sequencer};
use palisade_testkit::etcd::EtcdServer;
use palisade_testkit::redis::RedisServer;
use palisade_testkit::sql::SqlServer;
use palisade_testkit::zookeeper::ZooKeeperServer;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The binary under test.
pub(crate) const PALISADE: &str = env!("CARGO_BIN_EXE_palisade");

/// The documented exit codes (docs/cli.md).
pub(crate) mod code {
    pub(crate) const OK: i32 = 0;
    pub(crate) const ERROR: i32 = 1;
    pub(crate) const USAGE: i32 = 2;
    pub(crate) const NOT_FOUND: i32 = 3;
    pub(crate) const STALE: i32 = 4;
    pub(crate) const REFUSED: i32 = 5;
    pub(crate) const LOCK_NOT_ACQUIRED: i32 = 6;
    pub(crate) const LEASE_LOST: i32 = 7;
    pub(crate) const COMMAND_NOT_FOUND: i32 = 127;
}

/// Every variable the binary reads: removed so the machine's environment
/// (a CI job's external servers, say) cannot change what a test means.
const PALISADE_ENV: [&str; 25] = [
    "PALISADE_BACKEND",
    "PALISADE_REDIS_GENERATIONS",
    "PALISADE_ETCD_ENDPOINTS",
    "PALISADE_REDIS_URL",
    "PALISADE_LOCK_TTL",
    "PALISADE_LOCK_DELAY",
    "PALISADE_LOCK_PREFIX",
    "PALISADE_SEQUENCER",
    "PALISADE_SERVER",
    "PALISADE_LIVE_CHECK",
    "PALISADE_LIVE_CHECK_ISSUER",
    "PALISADE_REDIS_CA_CERT",
    "PALISADE_ISSUER",
    "PALISADE_SIGN_KEY_FILE",
    "PALISADE_SIGN_KEY_ID",
    "PALISADE_TOKEN",
    "PALISADE_CA_CERT",
    "PALISADE_REDIS_FENCE",
    "PALISADE_OBJECT_LOCATION",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "RUST_LOG",
];

/// How long any one `palisade` run may take before the test gives up.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// `palisade <args>` with a clean environment; `PALISADE_BIN` names the
/// binary for `sh -c` scripts.
pub(crate) fn palisade<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(PALISADE);
    for name in PALISADE_ENV {
        command.env_remove(name);
    }
    command
        .env("PALISADE_BIN", PALISADE)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// What a finished run left behind.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: String,
}

impl Finished {
    pub(crate) fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    pub(crate) fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Asserts the exit code, showing everything on failure.
    #[track_caller]
    pub(crate) fn assert_code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code(),
            expected,
            "exit code; stdout: {:?}; stderr: {}",
            self.stdout_text(),
            self.stderr
        );
        self
    }

    /// Asserts the exit code and that standard error is exactly one line,
    /// `palisade: ...`, and returns that line.
    #[track_caller]
    pub(crate) fn one_line_error(&self, expected: i32) -> String {
        self.assert_code(expected);
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|line| !line.is_empty())
            .collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {:?}", self.stderr);
        assert!(lines[0].starts_with("palisade: "), "{:?}", lines[0]);
        lines[0].to_owned()
    }
}

/// Runs `command` to the end, capturing its output.
pub(crate) async fn finish(mut command: Command) -> Finished {
    let output = tokio::time::timeout(
        RUN_LIMIT,
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output(),
    )
    .await
    .expect("palisade finishes within a minute")
    .expect("palisade binary runs");
    Finished {
        status: output.status,
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Shorthand: runs `palisade <args>` to the end.
pub(crate) async fn run<I, S>(args: I) -> Finished
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    finish(palisade(args)).await
}

/// A `palisade serve` on a free port, killed on drop.
pub(crate) struct Served {
    _child: Child,
    _data_dir: tempfile::TempDir,
    pub(crate) url: String,
}

impl Served {
    /// `palisade get --server URL NAME KEY`, without a sequencer.
    pub(crate) async fn get(&self, name: &LockName, key: &str) -> Finished {
        finish(palisade(["get", "--server", &self.url, name.as_str(), key])).await
    }
}

/// Starts `palisade serve --listen 127.0.0.1:0` and waits for its
/// "listening on" line.
pub(crate) async fn serve() -> Served {
    serve_with::<&str>(&[]).await
}

/// [`serve`] with more flags (`--tokens-file`, `--verify-keys-file`...).
pub(crate) async fn serve_with<S: AsRef<std::ffi::OsStr>>(extra: &[S]) -> Served {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut child = palisade(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir.path())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("palisade serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = next_line(&mut lines, Duration::from_secs(30)).await;
    let address = line
        .strip_prefix("palisade-server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line `{line}`"))
        .to_owned();
    Served {
        _child: child,
        _data_dir: data_dir,
        url: format!("http://{address}"),
    }
}

/// Whether `pid` is gone (or a zombie: dead, waiting to be reaped).
pub(crate) fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// The next line of a child's output, within `limit`.
pub(crate) async fn next_line<R: AsyncRead + Unpin>(
    lines: &mut Lines<BufReader<R>>,
    limit: Duration,
) -> String {
    tokio::time::timeout(limit, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("no line within {limit:?}"))
        .expect("read a line")
        .expect("a line before the end of the output")
}

/// A real lock service for `palisade lock`.
pub(crate) enum Backend {
    Etcd(Box<EtcdServer>),
    Redis(RedisServer),
    /// A Redis Cluster with a replica per master, shared by the cases of
    /// one test (`--redis-url redis+cluster://...`).
    RedisCluster(std::sync::Arc<palisade_testkit::redis::RedisCluster>),
    /// Three independent Redis masters for `--backend redlock`.
    Redlock(Vec<RedisServer>),
    /// PostgreSQL or MariaDB.
    Sql(SqlServer),
    ZooKeeper(ZooKeeperServer),
}

impl Backend {
    /// A single-member etcd from the testkit.
    pub(crate) fn etcd() -> Backend {
        Backend::Etcd(Box::new(EtcdServer::start()))
    }

    /// A Redis server from the testkit.
    pub(crate) fn redis() -> Backend {
        Backend::Redis(RedisServer::start())
    }

    /// Three Redis masters from the testkit, for Redlock.
    pub(crate) fn redlock() -> Backend {
        Backend::Redlock(
            (0..3)
                .map(|_| RedisServer::spawn(Default::default()))
                .collect(),
        )
    }

    /// A PostgreSQL server from the testkit.
    pub(crate) fn postgres() -> Backend {
        Backend::Sql(SqlServer::postgres())
    }

    /// A MariaDB server from the testkit.
    pub(crate) fn mariadb() -> Backend {
        Backend::Sql(SqlServer::mariadb())
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backend::Etcd(_) => "etcd",
            Backend::Redis(_) => "redis",
            Backend::RedisCluster(_) => "redis-cluster",
            Backend::Redlock(_) => "redlock",
            Backend::Sql(sql) => match sql.dialect() {
                palisade_testkit::sql::Dialect::Postgres => "postgres",
                palisade_testkit::sql::Dialect::MariaDb => "mariadb",
            },
            Backend::ZooKeeper(_) => "zookeeper",
        }
    }

    /// A standalone ZooKeeper from the testkit.
    pub(crate) fn zookeeper() -> Backend {
        Backend::ZooKeeper(ZooKeeperServer::start())
    }

    /// The flags that select this service.
    pub(crate) fn flags(&self) -> Vec<String> {
        match self {
            Backend::Etcd(etcd) => vec![
                "--backend".into(),
                "etcd".into(),
                "--etcd-endpoints".into(),
                etcd.endpoints().join(","),
            ],
            Backend::Redis(redis) => vec![
                "--backend".into(),
                "redis".into(),
                "--redis-url".into(),
                redis.url(),
            ],
            Backend::RedisCluster(cluster) => {
                let nodes: Vec<&str> = cluster
                    .urls()
                    .iter()
                    .map(|url| url.trim_start_matches("redis://"))
                    .collect();
                vec![
                    "--backend".into(),
                    "redis".into(),
                    "--redis-url".into(),
                    format!("redis+cluster://{}", nodes.join(",")),
                ]
            }
            Backend::Redlock(masters) => {
                let mut flags = vec!["--backend".into(), "redlock".into()];
                for master in masters {
                    flags.push("--redis-url".into());
                    flags.push(master.url());
                }
                flags
            }
            Backend::Sql(sql) => vec![
                "--backend".into(),
                self.name().into(),
                "--database-url".into(),
                sql.url(),
            ],
            Backend::ZooKeeper(zookeeper) => vec![
                "--backend".into(),
                "zookeeper".into(),
                "--zookeeper".into(),
                zookeeper.connect_string(),
            ],
        }
    }

    /// Ends the lease behind `sequencer` from outside, as a lock service
    /// whose clock jumped or an operator would: for etcd, `etcdctl lease
    /// revoke` on the sequencer's `lease` field; for Redis, `DEL` of the
    /// lock key.
    pub(crate) fn end_lease(&self, sequencer: &Sequencer) {
        match self {
            Backend::Etcd(etcd) => {
                let etcdctl = palisade_testkit::process::require_binary("etcdctl");
                let lease = sequencer
                    .lease()
                    .expect("etcd sequencers carry the lease id");
                let output = std::process::Command::new(etcdctl)
                    .env("ETCDCTL_API", "3")
                    .arg(format!("--endpoints={}", etcd.endpoints().join(",")))
                    .args(["lease", "revoke", lease])
                    .output()
                    .expect("etcdctl runs");
                assert!(
                    output.status.success(),
                    "etcdctl lease revoke {lease}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            Backend::Redis(redis) => {
                let keys = palisade_lock_redis::LockKeys::new(
                    palisade_lock_redis::RedisConfig::DEFAULT_KEY_PREFIX,
                    sequencer.lock(),
                );
                let deleted = redis
                    .command(&["DEL", keys.lock()])
                    .expect("DEL the lock key");
                assert_eq!(deleted.trim(), "1", "the lock key existed");
            }
            Backend::RedisCluster(cluster) => {
                let keys = palisade_lock_redis::LockKeys::new(
                    palisade_lock_redis::RedisConfig::DEFAULT_KEY_PREFIX,
                    sequencer.lock(),
                );
                let master = cluster.master_of_slot(cluster.keyslot(keys.lock()));
                let deleted = cluster
                    .command(master, &["DEL", keys.lock()])
                    .expect("DEL the lock key");
                assert_eq!(deleted.trim(), "1", "the lock key existed");
            }
            Backend::Redlock(masters) => {
                let keys = palisade_lock_redis::LockKeys::new(
                    palisade_lock_redis::RedisConfig::DEFAULT_KEY_PREFIX,
                    sequencer.lock(),
                );
                for master in masters {
                    master
                        .command(&["DEL", keys.lock()])
                        .expect("DEL the lock key");
                }
            }
            Backend::Sql(sql) => {
                // Expire the holder's session row by the database's clock,
                // as a crash past the TTL would.
                sql.query(&format!(
                    "UPDATE palisade_sessions SET expires_at_us = 0, ended = 1 \
                     WHERE id IN (SELECT session_id FROM palisade_holders \
                     WHERE name = '{}' AND generation = {})",
                    sequencer.lock().as_str(),
                    sequencer.generation().get()
                ))
                .expect("expire the holder's session");
            }
            Backend::ZooKeeper(_) => panic!(
                "the ZooKeeper cases end a lease the way ZooKeeper does, by stopping its holder past the session timeout"
            ),
        }
    }
}

/// A lock name unique to this run, so tests against a shared external
/// lock service never meet.
pub(crate) fn unique_name(backend: &str, test: &str) -> LockName {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    LockName::new(format!(
        "cli/{backend}/{test}/{}-{serial}",
        std::process::id()
    ))
    .expect("valid name")
}

/// The sequencer `palisade lock` printed on standard error.
#[track_caller]
pub(crate) fn printed_sequencer(stderr: &str) -> Sequencer {
    let line = stderr
        .lines()
        .find(|line| line.starts_with("palisade: acquired lock"))
        .unwrap_or_else(|| panic!("no `acquired` line in {stderr:?}"));
    let text = line
        .rsplit_once("sequencer ")
        .unwrap_or_else(|| panic!("no sequencer in {line:?}"))
        .1;
    text.parse()
        .unwrap_or_else(|error| panic!("{text:?}: {error}"))
}

/// A temporary directory for files a command under test writes.
pub(crate) fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The contents of `dir/name`, if the file exists.
pub(crate) fn read(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

/// `dir/name` as a string for scripts.
pub(crate) fn path_in(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Generous bounds on a paused holder's steps, for a loaded 2-core machine.
const HOLDER_STARTUP_LIMIT: Duration = Duration::from_secs(30);
const HOLDER_WRITE_LIMIT: Duration = Duration::from_secs(30);

/// A `palisade lock` holder whose command waits on a FIFO with a write in
/// hand, with its `palisade lock` process stopped (no renewals, no
/// reaction to a lost lease: a GC pause of the whole holder).
pub(crate) struct PausedHolder {
    child: Child,
    pid: Pid,
    out: Lines<BufReader<ChildStdout>>,
    go: PathBuf,
    _files: tempfile::TempDir,
}

impl PausedHolder {
    /// Takes `name` with a lease of `ttl` (fencing on acquire, since it
    /// knows the resource server), then stops.
    pub(crate) async fn start(
        backend: &Backend,
        served: &Served,
        name: &LockName,
        ttl: &str,
    ) -> PausedHolder {
        let files = scratch();
        let go = files.path().join("go");
        let script = r#"mkfifo "$GO" && echo ready || exit 1
read _ < "$GO"
"$PALISADE_BIN" put "$PALISADE_LOCK" k from-a > /dev/null 2>&1
echo "$?""#;
        let mut a = palisade(["lock", "--ttl", ttl]);
        a.args(backend.flags())
            .args([name.as_str(), "--", "sh", "-c", script])
            .env("PALISADE_SERVER", &served.url)
            .env("GO", &go)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = a.spawn().expect("palisade lock (A) starts");
        let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        assert_eq!(next_line(&mut out, HOLDER_STARTUP_LIMIT).await, "ready");
        let pid = Pid::from_raw(i32::try_from(child.id().expect("A runs")).expect("pid"));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP A");
        PausedHolder {
            child,
            pid,
            out,
            go,
            _files: files,
        }
    }

    /// Lets A's command send its write (A's `palisade lock` is still
    /// stopped) and returns the write's exit code.
    pub(crate) async fn write_late(mut self) -> i32 {
        let go = self.go.clone();
        let writer = std::thread::spawn(move || {
            let mut fifo = std::fs::OpenOptions::new()
                .write(true)
                .open(&go)
                .expect("open the FIFO");
            fifo.write_all(b"go\n").expect("write the FIFO");
        });
        let put_code = next_line(&mut self.out, HOLDER_WRITE_LIMIT).await;
        writer.join().expect("FIFO writer");
        kill(self.pid, Signal::SIGCONT).expect("SIGCONT A");
        let _ = tokio::time::timeout(HOLDER_STARTUP_LIMIT, self.child.wait()).await;
        put_code.parse().expect("an exit code")
    }
}
