//! An S3-compatible server for tests: moto's S3 in server mode, from PyPI
//! in a venv under `target/` (made once, then reused), on a free loopback
//! port in a temporary directory, killed by PID on drop.
//!
//! ```no_run
//! use palisade_testkit::s3::S3Server;
//!
//! let s3 = S3Server::start(); // fails the test, with an install hint, without python3-venv
//! s3.create_bucket("tests").unwrap();
//! let endpoint = s3.endpoint(); // http://127.0.0.1:<port>
//! # drop(endpoint);
//! ```
//!
//! Two things are added around moto's own WSGI application, in a launcher
//! written into the server's directory ([`LAUNCHER`]):
//!
//! - **One request at a time.** moto's threaded server checks a PUT's
//!   `If-Match` and then stores the object in two steps with no lock
//!   between them, so two concurrent conditional writes can both pass.
//!   S3 applies a conditional write atomically; the launcher serialises
//!   requests so moto does too (connections stay concurrent).
//! - **Optional persistence** ([`S3Options::persistent`]): every
//!   mutating request that succeeded is appended to a journal in the
//!   server's directory *before* its answer is sent, and replayed on
//!   start. So [`S3Server::restart`] after `kill -9` keeps every
//!   acknowledged write, as a real store would.
//!
//! [`ConditionStrippingProxy`] is the store that ignores conditions: a
//! loopback HTTP proxy that removes `If-Match` and `If-None-Match` from
//! every request, for the start-up probe's test and the mutation check.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use tempfile::TempDir;

use crate::process::{self, ChildProcess};

/// The moto release the venv holds (If-Match on PutObject since 5.1.4).
pub const MOTO_VERSION: &str = "5.2.5";

/// What the venv installs: moto's S3 and its server's web framework, pinned.
pub const MOTO_REQUIREMENTS: &[&str] = &[
    "moto[s3]==5.2.5",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "werkzeug==3.1.9",
];

/// The launcher: moto's WSGI app, one request at a time, with an optional
/// journal of successful mutations replayed on start.
pub const LAUNCHER: &str = r#"
import base64, io, json, os, sys, threading
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

port = int(sys.argv[1])
journal_path = sys.argv[2] if len(sys.argv) > 2 else None
app = DomainDispatcherApplication(create_backend_app)
lock = threading.Lock()
KEPT = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH",
        "REQUEST_URI", "RAW_URI", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "wsgi.url_scheme")

def call(environ):
    answer = {}
    def start_response(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, headers
        return lambda data: None
    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body

def replay(entry):
    environ = dict(entry["environ"])
    environ.update({"wsgi.input": io.BytesIO(base64.b64decode(entry["body"])), "wsgi.errors": sys.stderr,
                    "wsgi.version": (1, 0), "wsgi.multithread": False, "wsgi.multiprocess": False,
                    "wsgi.run_once": False, "REMOTE_ADDR": "127.0.0.1"})
    call(environ)

journal = None
if journal_path:
    if os.path.exists(journal_path):
        with open(journal_path) as lines:
            count = 0
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    break  # a torn last line: its request was never answered
                replay(entry)
                count += 1
        print(f"replayed {count} requests", file=sys.stderr, flush=True)
    journal = open(journal_path, "a")

def serial(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    with lock:
        status, headers, answer = call(environ)
        if journal and environ["REQUEST_METHOD"] in ("PUT", "POST", "DELETE") and status.startswith("2"):
            kept = {key: value for key, value in environ.items() if key in KEPT or key.startswith("HTTP_")}
            journal.write(json.dumps({"environ": kept, "body": base64.b64encode(body).decode()}) + "\n")
            journal.flush()
    start_response(status, headers)
    return [answer]

run_simple("127.0.0.1", port, serial, threaded=True, use_reloader=False)
"#;

/// The venv's Python, made (once, under a file lock, shared by every test
/// binary) if it is missing or holds another moto.
///
/// # Panics
///
/// When the venv cannot be made, with an install hint.
pub fn moto_python() -> PathBuf {
    let target = target_dir();
    let venv = target.join("moto-venv");
    let python = venv.join("bin/python");
    std::fs::create_dir_all(&target).expect("create the target directory");
    let lock_file =
        std::fs::File::create(target.join("moto-venv.lock")).expect("create the venv's lock file");
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .expect("lock the venv's lock file");
    if has_moto(&python) {
        return python;
    }
    let hint = |what: &str| -> String {
        format!(
            "{what}: moto (S3 in server mode) could not be installed into {}; run the README's test command (scripts/test.sh), or `apt-get install python3 python3-venv` with access to PyPI",
            venv.display()
        )
    };
    let _ = std::fs::remove_dir_all(&venv);
    let python3 =
        process::find_binary("python3").unwrap_or_else(|| panic!("{}", hint("no python3")));
    let made = Command::new(python3)
        .args(["-m", "venv"])
        .arg(&venv)
        .status();
    assert!(
        matches!(made, Ok(status) if status.success()),
        "{}",
        hint("`python3 -m venv` failed")
    );
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--disable-pip-version-check"])
        .args(MOTO_REQUIREMENTS)
        .status();
    assert!(
        matches!(installed, Ok(status) if status.success()),
        "{}",
        hint("`pip install` failed")
    );
    assert!(
        has_moto(&python),
        "{}",
        hint("moto does not import after installing")
    );
    python
}

fn has_moto(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import moto, flask_cors; print(moto.__version__)"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == MOTO_VERSION)
}

/// `$CARGO_TARGET_DIR`, or the workspace's `target/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Options for a spawned server.
#[derive(Debug, Clone, Copy, Default)]
pub struct S3Options {
    /// Journal successful mutations and replay them on start, so a restart
    /// (even after `kill -9`) keeps every acknowledged write.
    pub persistent: bool,
}

/// moto's S3 on a free loopback port.
#[derive(Debug)]
pub struct S3Server {
    python: PathBuf,
    options: S3Options,
    port: u16,
    dir: TempDir,
    child: Option<ChildProcess>,
}

impl S3Server {
    /// A server without persistence.
    ///
    /// # Panics
    ///
    /// When moto cannot be installed (with an install hint) or started.
    pub fn start() -> S3Server {
        S3Server::spawn(S3Options::default())
    }

    /// A server with `options`.
    pub fn spawn(options: S3Options) -> S3Server {
        let python = moto_python();
        let mut last_error = None;
        for _ in 0..5 {
            let mut server = S3Server {
                python: python.clone(),
                options,
                port: process::free_port(),
                dir: tempfile::Builder::new()
                    .prefix("palisade-s3-")
                    .tempdir()
                    .expect("create a temporary directory for moto"),
                child: None,
            };
            std::fs::write(server.dir.path().join("launcher.py"), LAUNCHER)
                .expect("write moto's launcher");
            match server.launch() {
                Ok(()) => return server,
                Err(error) => last_error = Some(error),
            }
        }
        panic!(
            "moto did not start after 5 attempts: {}",
            last_error.map(|e| e.to_string()).unwrap_or_default()
        );
    }

    fn launch(&mut self) -> io::Result<()> {
        let log_path = self.dir.path().join("moto.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut command = Command::new(&self.python);
        command
            .arg(self.dir.path().join("launcher.py"))
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if self.options.persistent {
            command.arg(self.dir.path().join("journal.jsonl"));
        }
        let mut child = ChildProcess::spawn("moto", &mut command, Some(&log_path))?;
        // Importing moto takes a few seconds on a loaded machine.
        if let Err(error) = process::wait_for_tcp(self.address(), Duration::from_secs(60)) {
            let tail = child.log_tail(2000);
            let _ = child.kill();
            return Err(io::Error::new(error.kind(), format!("{error}\n{tail}")));
        }
        self.child = Some(child);
        Ok(())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address())
    }

    /// The server's address.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The PID of the running server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ChildProcess::pid)
    }

    /// Kills the server (SIGKILL).
    pub fn kill(&mut self) -> io::Result<()> {
        match self.child.take() {
            Some(mut child) => child.kill(),
            None => Ok(()),
        }
    }

    /// Starts the server again on the same port and directory (after
    /// [`S3Server::kill`], or killing it now); persistent, it replays its
    /// journal first.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.launch()
    }

    /// Pauses the server (SIGSTOP).
    pub fn pause(&self) -> io::Result<()> {
        self.running()?.pause()
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.running()?.resume()
    }

    fn running(&self) -> io::Result<&ChildProcess> {
        self.child
            .as_ref()
            .ok_or_else(|| io::Error::other("moto is not running"))
    }

    /// The writes the server acknowledged, in the order it applied them,
    /// from its journal (persistent servers only): `(path, body)` of every
    /// successful `PUT` (`/<bucket>/<key>`). The store's own commit order,
    /// for a checker.
    pub fn acknowledged_puts(&self) -> io::Result<Vec<(String, Vec<u8>)>> {
        let text = std::fs::read_to_string(self.dir.path().join("journal.jsonl"))?;
        let mut puts = Vec::new();
        for line in text.lines() {
            // A torn last line: its request was never answered.
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
                break;
            };
            let field = |name: &str| {
                entry["environ"][name]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            };
            if field("REQUEST_METHOD") != "PUT" || !field("QUERY_STRING").is_empty() {
                continue;
            }
            let body = base64::engine::general_purpose::STANDARD
                .decode(entry["body"].as_str().unwrap_or_default())
                .map_err(io::Error::other)?;
            puts.push((field("PATH_INFO"), body));
        }
        Ok(puts)
    }

    /// Creates a bucket (an unsigned `PUT /<bucket>`, which moto accepts).
    pub fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        let mut stream = TcpStream::connect(self.address())?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.address()
        )?;
        let mut status = String::new();
        BufReader::new(stream).read_line(&mut status)?;
        if status.split_whitespace().nth(1) == Some("200") {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "creating bucket `{bucket}`: {}",
                status.trim()
            )))
        }
    }
}

/// A loopback HTTP/1.1 proxy that forwards requests to an S3 server with
/// `If-Match` and `If-None-Match` removed: a store that ignores conditional
/// writes. Requests must carry a `Content-Length` (object_store's do).
/// Stopped on drop.
#[derive(Debug)]
pub struct ConditionStrippingProxy {
    address: SocketAddr,
    stripped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl ConditionStrippingProxy {
    /// Starts the proxy in front of `upstream`, removing both headers.
    pub fn start(upstream: SocketAddr) -> io::Result<Self> {
        Self::stripping(upstream, &["if-match", "if-none-match"])
    }

    /// Starts the proxy in front of `upstream`, removing the headers named
    /// (lower case), e.g. only `if-match`.
    pub fn stripping(upstream: SocketAddr, headers: &'static [&'static str]) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = listener.local_addr()?;
        let stripped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counter, stopping) = (Arc::clone(&stripped), Arc::clone(&stop));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    let _ = forward(client, upstream, headers, &counter);
                });
            }
        });
        Ok(ConditionStrippingProxy {
            address,
            stripped,
            stop,
        })
    }

    /// `http://127.0.0.1:<port>`: the endpoint to give clients.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The proxy's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// How many condition headers were removed so far.
    pub fn stripped(&self) -> u64 {
        self.stripped.load(Ordering::Relaxed)
    }
}

impl Drop for ConditionStrippingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
    }
}

/// One client connection: requests upstream without their conditions,
/// answers back as they are.
fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    headers: &[&str],
    stripped: &AtomicU64,
) -> io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    let (mut server_in, mut client_out) = (server.try_clone()?, client.try_clone()?);
    std::thread::spawn(move || {
        let _ = io::copy(&mut server_in, &mut client_out);
        let _ = client_out.shutdown(std::net::Shutdown::Both);
    });
    let mut requests = BufReader::new(client);
    let mut server_out = server;
    loop {
        let mut head = Vec::new();
        let mut content_length = 0usize;
        loop {
            let mut line = String::new();
            if requests.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let name = line
                .split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if headers.contains(&name.as_str()) {
                stripped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if name == "content-length" {
                content_length = line
                    .split(':')
                    .nth(1)
                    .unwrap_or_default()
                    .trim()
                    .parse()
                    .unwrap_or(0);
            }
            let end = line == "\r\n";
            head.extend_from_slice(line.as_bytes());
            if end {
                break;
            }
        }
        server_out.write_all(&head)?;
        let mut body = (&mut requests).take(content_length as u64);
        io::copy(&mut body, &mut server_out)?;
    }
}
