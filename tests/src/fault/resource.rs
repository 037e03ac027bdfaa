//! The resource server as a child process: its own data directory and
//! port, killed with SIGKILL and restarted on both, paused with SIGSTOP.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use palisade::client::Client;
use palisade_testkit::process::{ChildProcess, Signal};

use super::{FaultBinaries, FaultRun};

/// How long a server may take to print its address (sled recovery after a
/// crash included), on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful stop may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How to start a [`ResourceServerProcess`].
#[derive(Debug, Clone, Default)]
pub struct ResourceServerOptions {
    /// Fencing off (`--unfenced`): the mutation check only.
    pub unfenced: bool,
    /// Acknowledgements without a sync of the data files (`--unsynced`):
    /// the I-DUR mutation check only.
    pub unsynced: bool,
    /// The data directory; by default `server-data` in the run's directory.
    /// Point it into a small tmpfs or a loop-mounted file system for disk
    /// faults.
    pub data_dir: Option<PathBuf>,
    /// A command the server runs under, e.g. `["fiu-run", "-x"]`; the
    /// wrapper must `exec` the server so the PID is the server's.
    pub command_prefix: Vec<OsString>,
    /// Extra environment variables.
    pub env: Vec<(OsString, OsString)>,
    /// Extra server flags (`--durability buffered`, ...).
    pub extra_args: Vec<OsString>,
    /// The port of the first start (default: a free one). Restarts always
    /// reuse the port of the previous start.
    pub port: Option<u16>,
    /// `--store SPEC` instead of `--data-dir` (e.g. a PostgreSQL URL: the
    /// data directory is then unused).
    pub store: Option<String>,
    /// `RUST_LOG` for the server (default `warn,palisade_store::fence=info`).
    pub log_filter: Option<String>,
    /// The PostgreSQL engine's fenced reads held in transactions across
    /// round trips (`--held-transactions`): scenario 20's mutation check.
    pub held_transactions: bool,
}

impl ResourceServerOptions {
    /// Fencing off: every write accepted (the mutation check).
    pub fn unfenced(mut self) -> Self {
        self.unfenced = true;
        self
    }

    /// Writes acknowledged before the data files are synced: the I-DUR
    /// mutation check.
    pub fn unsynced(mut self) -> Self {
        self.unsynced = true;
        self
    }

    /// Fenced reads of the PostgreSQL engine held in transactions across
    /// round trips: scenario 20's mutation check.
    pub fn held_transactions(mut self) -> Self {
        self.held_transactions = true;
        self
    }

    /// Uses `data_dir` as the data directory.
    pub fn data_dir(mut self, data_dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(data_dir.into());
        self
    }

    /// Runs the server under `prefix` (e.g. `fiu-run -x`).
    pub fn command_prefix<I, S>(mut self, prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.command_prefix = prefix.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Adds a server flag.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Keeps marks and data in the engine `spec` names (`--store`).
    pub fn store(mut self, spec: impl Into<String>) -> Self {
        self.store = Some(spec.into());
        self
    }

    /// Listens on `port` from the first start.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }
}

/// `src/bin/resource-server.rs` running as a child process, killed by PID
/// on drop.
#[derive(Debug)]
pub struct ResourceServerProcess {
    binary: PathBuf,
    options: ResourceServerOptions,
    data_dir: PathBuf,
    log_dir: PathBuf,
    /// The port of the current (or last) start; restarts reuse it so every
    /// client and proxy keeps its URL.
    port: u16,
    /// Starts so far; names each start's log file.
    starts: u32,
    child: Option<ChildProcess>,
}

impl ResourceServerProcess {
    /// Starts the server for `run`: its data directory and logs go in the
    /// run's directory unless `options` says otherwise.
    pub fn start(
        binaries: &FaultBinaries,
        run: &FaultRun,
        options: ResourceServerOptions,
    ) -> anyhow::Result<Self> {
        Self::start_at(&binaries.resource_server, run.dir(), options)
    }

    /// Starts `binary` with its logs (and default data directory) in
    /// `log_dir`.
    pub fn start_at(
        binary: &Path,
        log_dir: &Path,
        options: ResourceServerOptions,
    ) -> anyhow::Result<Self> {
        let data_dir = options
            .data_dir
            .clone()
            .unwrap_or_else(|| log_dir.join("server-data"));
        let mut server = ResourceServerProcess {
            binary: binary.to_owned(),
            port: options.port.unwrap_or(0),
            options,
            data_dir,
            log_dir: log_dir.to_owned(),
            starts: 0,
            child: None,
        };
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "the resource server is running");
        // A restart binds the port its predecessor had; the old socket may
        // take a moment to go, so retry a few times.
        let mut last_error = None;
        for _attempt in 0..5 {
            match self.launch_once() {
                Ok(()) => return Ok(()),
                Err(error) if self.port != 0 => {
                    last_error = Some(error);
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    fn launch_once(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let log = self.log_dir.join(format!("server-{}.log", self.starts));
        let log_file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let (program, prefix_args) = match self.options.command_prefix.split_first() {
            Some((wrapper, wrapper_args)) => {
                let mut args = wrapper_args.to_vec();
                args.push(self.binary.clone().into_os_string());
                (wrapper.clone(), args)
            }
            None => (self.binary.clone().into_os_string(), Vec::new()),
        };
        let mut command = Command::new(program);
        command.args(prefix_args);
        match &self.options.store {
            Some(store) => command.arg("--store").arg(store),
            None => command.arg("--data-dir").arg(&self.data_dir),
        };
        command
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(&self.options.extra_args)
            .env(
                "RUST_LOG",
                self.options
                    .log_filter
                    .as_deref()
                    .unwrap_or("warn,palisade_store::fence=info"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file);
        if self.options.unfenced {
            command.arg("--unfenced").env("PALISADE_TEST_UNFENCED", "1");
        }
        if self.options.unsynced {
            command.arg("--unsynced").env("PALISADE_TEST_UNSYNCED", "1");
        }
        if self.options.held_transactions {
            command
                .arg("--held-transactions")
                .env("PALISADE_TEST_HELD_TRANSACTIONS", "1");
        }
        for (key, value) in &self.options.env {
            command.env(key, value);
        }
        let mut child = ChildProcess::spawn("resource-server", &mut command, Some(&log))?;
        let stdout = child.child_mut().stdout.take().context("no stdout pipe")?;
        // The first line is the address; read it on a thread so a server
        // that hangs during recovery cannot hang the test.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let result = BufReader::new(stdout).read_line(&mut line).map(|_| line);
            let _ = sender.send(result);
        });
        let line = match receiver.recv_timeout(START_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => anyhow::bail!("reading the server's address: {error}"),
            Err(_) => anyhow::bail!(
                "the resource server printed no address within {START_TIMEOUT:?}\n{}",
                child.log_tail(4000)
            ),
        };
        let address = line
            .trim()
            .strip_prefix("palisade-server listening on ")
            .with_context(|| {
                format!(
                    "the resource server did not start (first line {line:?})\n{}",
                    child.log_tail(4000)
                )
            })?;
        let address: std::net::SocketAddr = address.parse()?;
        self.port = address.port();
        self.child = Some(child);
        Ok(())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port (the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The PID of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ChildProcess::pid)
    }

    /// A client for this server with the given request timeout.
    pub fn client(&self, timeout: Duration) -> anyhow::Result<Client> {
        Ok(Client::with_timeout(&self.base_url(), timeout)?)
    }

    /// Whether the server process is still alive.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(ChildProcess::is_running)
    }

    /// SIGKILL, as a crash: nothing is flushed on the way out.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
        }
        Ok(())
    }

    /// Starts the server again on the same data directory and port.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill()?;
        self.launch()
    }

    /// Kills the server (SIGKILL) and starts it again on the same port,
    /// over the engine `spec` names: a server moved to a promoted standby.
    pub fn restart_on_store(&mut self, spec: impl Into<String>) -> anyhow::Result<()> {
        self.kill()?;
        self.options.store = Some(spec.into());
        self.launch()
    }

    /// SIGTERM, then waits for the graceful shutdown (flush included); kills
    /// it if that takes longer than 20 s. Returns whether it exited by
    /// itself.
    pub fn stop(&mut self) -> anyhow::Result<bool> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        child.signal(Signal::SIGTERM)?;
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        while std::time::Instant::now() < deadline {
            if !child.is_running() {
                return Ok(true);
            }
            // Waiting for a child to exit: no event to wait on without
            // taking over its reaping, so poll with a short period.
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill()?;
        Ok(false)
    }

    /// SIGSTOP: the server holds its sockets and answers nothing.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.running()?.pause()?;
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.running()?.resume()?;
        Ok(())
    }

    fn running(&self) -> anyhow::Result<&ChildProcess> {
        self.child
            .as_ref()
            .context("the resource server is not running")
    }

    /// The end of the current start's log, for failure messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        self.child
            .as_ref()
            .map(|child| child.log_tail(max_bytes))
            .unwrap_or_default()
    }
}
