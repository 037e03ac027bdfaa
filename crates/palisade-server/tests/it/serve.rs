//! The server on a real socket (127.0.0.1:0): `run` serves until its
//! shutdown future resolves, then flushes; the data is there after a
//! restart on the same directory; `--store` names the engine.

use palisade_core::Sequencer;
use palisade_server::{AppState, ServerConfig, StoreSpec, run};
use palisade_store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A server task serving `state` on `listener` until [`Serving::stop`].
pub(crate) struct Serving {
    pub(crate) base: String,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    pub(crate) fn spawn(listener: TcpListener, state: AppState) -> Serving {
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            run(listener, state, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Serving { base, stop, task }
    }

    /// A server as `palisade-server --store SPEC --listen 127.0.0.1:0`
    /// starts it.
    pub(crate) async fn store(spec: &str) -> Serving {
        let config = parse_store_flags(&["--store", spec, "--listen", "127.0.0.1:0"]).unwrap();
        let state = config.open_state(None).unwrap();
        Serving::spawn(config.bind().await.unwrap(), state)
    }

    /// Resolves once `run` has returned (after its flush).
    pub(crate) async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap();
    }
}

async fn start(dir: &std::path::Path) -> Serving {
    let store = Store::open(dir, StoreConfig::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Serving::spawn(listener, AppState::new(store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_flushes_and_a_restart_sees_everything() {
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let server = start(dir.path()).await;
    let base = server.base.clone();
    for generation in 1..=20u64 {
        let response = http
            .put(format!("{base}/v1/locks/e2e/keys/k{generation}"))
            .header(
                Sequencer::HTTP_HEADER,
                format!("v1;lock=e2e;mode=exclusive;gen={generation}"),
            )
            .body(format!("value {generation}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    server.stop().await;
    // The port is closed once `run` has returned.
    assert!(http.get(format!("{base}/healthz")).send().await.is_err());

    let server = start(dir.path()).await;
    let base = server.base.clone();
    for generation in 1..=20u64 {
        let body = http
            .get(format!("{base}/v1/locks/e2e/keys/k{generation}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, format!("value {generation}"));
    }
    let marks: serde_json::Value = http
        .get(format!("{base}/v1/locks/e2e/marks"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(marks["marks"]["exclusive"], 20);
    let stale = http
        .put(format!("{base}/v1/locks/e2e/keys/late"))
        .header(Sequencer::HTTP_HEADER, "v1;lock=e2e;mode=exclusive;gen=19")
        .body("late")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    server.stop().await;
}

#[test]
fn the_config_reads_flags_and_environment() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerConfig,
    }

    let cli = Cli::try_parse_from([
        "palisade-server",
        "--data-dir",
        "/tmp/x",
        "--listen",
        "127.0.0.1:0",
        "--durability",
        "buffered",
        "--buffered-flush-ms",
        "50",
        "--max-key-bytes",
        "16",
        "--max-batch-ops",
        "3",
        "--request-timeout",
        "1500ms",
    ])
    .unwrap();
    assert_eq!(
        cli.server.limits().unwrap().request_timeout,
        std::time::Duration::from_millis(1500)
    );
    let store = cli.server.store_config();
    assert_eq!(store.durability.name(), "buffered");
    assert_eq!(store.limits.max_key_bytes, 16);
    assert_eq!(store.limits.max_batch_ops, 3);
    assert_eq!(cli.server.listen.port(), 0);
    assert!(
        Cli::try_parse_from([
            "palisade-server",
            "--data-dir",
            "/x",
            "--durability",
            "sometimes"
        ])
        .is_err()
    );
    assert!(
        Cli::try_parse_from(["palisade-server"]).is_err()
            || std::env::var_os("PALISADE_DATA_DIR").is_some()
    );
    // A duration without a unit is refused (one grammar: core's).
    let bare = Cli::try_parse_from([
        "palisade-server",
        "--data-dir",
        "/x",
        "--request-timeout",
        "10",
    ]);
    assert!(bare.is_err_and(|e| e.to_string().contains("has no unit")));
    let defaults = Cli::try_parse_from(["palisade-server", "--data-dir", "/x"]).unwrap();
    if std::env::var_os("PALISADE_REQUEST_TIMEOUT").is_none() {
        assert_eq!(
            defaults.server.limits().unwrap().request_timeout,
            std::time::Duration::from_secs(10)
        );
    }
}

/// Issue #30: a port already in use printed "Address already in use (os
/// error 98)" twice and did not name the address. Now: one line that
/// names it, and a failed exit.
#[test]
fn a_port_in_use_is_one_line_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_palisade-server"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--listen")
        .arg(addr.to_string())
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let output = match exited.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("palisade-server kept running on a port in use");
        }
    };
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let naming: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(&addr.to_string()) || line.contains("in use"))
        .collect();
    assert_eq!(
        naming,
        [format!(
            "palisade-server: cannot listen on {addr}: address already in use"
        )],
        "{stderr}"
    );
    assert!(!stderr.contains("os error"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing on standard output");
    drop(taken);
}

#[derive(clap::Parser)]
struct StoreCli {
    #[command(flatten)]
    server: ServerConfig,
}

pub(crate) fn parse_store_flags(args: &[&str]) -> Result<ServerConfig, clap::Error> {
    use clap::Parser;
    let argv = std::iter::once("palisade-server").chain(args.iter().copied());
    StoreCli::try_parse_from(argv).map(|cli| cli.server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_sled_serves_from_its_directory_and_health_names_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("sled:{}", dir.path().display());
    let config = parse_store_flags(&["--store", &spec, "--listen", "127.0.0.1:0"]).unwrap();
    assert_eq!(
        config.store_spec().unwrap(),
        StoreSpec::Sled {
            dir: dir.path().into()
        }
    );
    let server = Serving::store(&spec).await;
    let base = &server.base;
    let http = reqwest::Client::new();
    let health: serde_json::Value = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["engine"]["name"], "sled");
    assert_eq!(health["engine"]["durability"], "flushed");
    let put = http
        .put(format!("{base}/v1/locks/s/keys/k"))
        .header(Sequencer::HTTP_HEADER, "v1;lock=s;mode=exclusive;gen=3")
        .body("in the named directory")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    server.stop().await;

    // The write is in the directory `--store` named.
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    let lock = palisade_core::LockName::new("s").unwrap();
    let read = store.get(&lock, b"k", None).unwrap().unwrap();
    assert_eq!(read.value.as_deref(), Some(&b"in the named directory"[..]));
}

#[test]
fn store_flags_are_checked_and_engines_not_built_in_are_named() {
    // One place names the store: --store and --data-dir together is an
    // error, and so is a value no engine recognises.
    assert!(parse_store_flags(&["--store", "sled:/x", "--data-dir", "/y"]).is_err());
    for (spec, reason) in [
        ("mysql://app:pw@db/x", "expected `sled:<dir>`"),
        ("etcd://app:pw@db:2379", "credentials in an etcd URL"),
        ("etcd://host-without-port", "needs a port"),
    ] {
        let config = parse_store_flags(&["--store", spec]).unwrap();
        let error = config.store_spec().unwrap_err().to_string();
        assert!(error.contains(reason), "{error}");
        assert!(!error.contains(":pw@"), "the password is hidden: {error}");
        let error = config.open_store().expect_err("refused").to_string();
        assert!(error.contains(reason), "{error}");
    }

    // `--data-dir DIR` is `sled:DIR`.
    let config = parse_store_flags(&["--data-dir", "/srv/palisade"]).unwrap();
    assert_eq!(
        config.store_spec().unwrap(),
        StoreSpec::Sled {
            dir: "/srv/palisade".into()
        }
    );

    // The etcd engine connects on the caller's runtime, which must be
    // multi-threaded; without one the error says so.
    let config = parse_store_flags(&["--store", "etcd://127.0.0.1:1/palisade"]).unwrap();
    assert_eq!(config.store_spec().unwrap().engine(), "etcd");
    let error = config.open_store().expect_err("no runtime").to_string();
    assert!(error.contains("multi-threaded tokio runtime"), "{error}");

    // PostgreSQL is built in here (the tests turn on every engine's
    // feature): `postgres_store.rs`. A build without it: `engines.rs`.
}

/// sled's settings mean nothing to an engine that acknowledges only what
/// its database committed: given with one, they are refused, naming the
/// setting, before anything is opened.
#[test]
fn sled_only_settings_are_refused_with_postgres_and_etcd() {
    for store in ["postgres://app:s3cret@db/p", "etcd://127.0.0.1:1/p"] {
        for flags in [
            &["--durability", "buffered"][..],
            &["--cache-capacity-bytes", "1048576"][..],
        ] {
            let mut args = vec!["--store", store];
            args.extend_from_slice(flags);
            let config = parse_store_flags(&args).unwrap();
            let error = config.open_state(None).expect_err("refused").to_string();
            assert!(error.contains(flags[0]), "{error}");
            assert!(error.contains("sled engine only"), "{error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
        // What the engine honours is accepted: `flushed` is what it does.
        let config = parse_store_flags(&["--store", store, "--durability", "flushed"]).unwrap();
        assert!(config.store_spec().is_ok());
    }
}

/// `--store etcd://host:port/prefix` against a real etcd: two servers over
/// one prefix are replicas of one store. A write through one is read
/// through the other, and a holder the first has fenced off is refused by
/// the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_etcd_two_servers_over_one_prefix_share_marks_and_data() {
    let etcd = palisade_testkit::etcd::EtcdServer::start();
    let hosts: Vec<String> = etcd
        .endpoints()
        .iter()
        .map(|endpoint| endpoint.trim_start_matches("http://").to_owned())
        .collect();
    let spec = format!(
        "etcd://{}/palisade-test/serve-{}-{}",
        hosts.join(","),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    two_servers_share_the_fence(&spec, "etcd", "Raft majority").await;
}

/// Two servers over one shared store (`spec`, a `--store` value) are
/// replicas of one store: both name `engine` (whose durability mentions
/// `durability`), a write through the first is read through the second,
/// and a holder the first has fenced off is refused by the second.
pub(crate) async fn two_servers_share_the_fence(spec: &str, engine: &str, durability: &str) {
    let first = Serving::store(spec).await;
    let second = Serving::store(spec).await;
    let http = reqwest::Client::new();
    for server in [&first, &second] {
        let health: serde_json::Value = http
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(health["engine"]["name"], engine);
        // The engine acknowledges only what it committed durably.
        assert_eq!(health["durability"], "flushed", "{health}");
        assert!(
            health["engine"]["durability"]
                .as_str()
                .unwrap()
                .contains(durability),
            "{health}"
        );
    }

    let put = |base: &str, generation: u64, body: &'static str| {
        http.put(format!("{base}/v1/locks/orders%2F7/keys/stock"))
            .header(
                Sequencer::HTTP_HEADER,
                format!("v1;lock=orders/7;mode=exclusive;gen={generation}"),
            )
            .body(body)
            .send()
    };
    let read = async |base: &str| {
        let read = http
            .get(format!("{base}/v1/locks/orders%2F7/keys/stock"))
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200);
        read.text().await.unwrap()
    };
    // Generation 5 writes through the first server; the second reads it.
    assert_eq!(put(&first.base, 5, "five").await.unwrap().status(), 200);
    assert_eq!(read(&second.base).await, "five");
    // The holder of 4, late, tries the second: refused, because the mark
    // lives in the shared store, not in a server.
    assert_eq!(
        put(&second.base, 4, "four, late").await.unwrap().status(),
        409
    );
    assert_eq!(read(&second.base).await, "five");
    first.stop().await;
    second.stop().await;
}
