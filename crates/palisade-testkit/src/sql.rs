//! Real PostgreSQL and MariaDB servers for tests, on loopback.
//!
//! Each server gets a free port on 127.0.0.1 and a data directory inside a
//! [`TempDir`]; it is killed (SIGKILL, by PID) when its handle drops, and
//! [`SqlServer::kill`] + [`SqlServer::restart`] bring it back on the same
//! port and data, the way a crashed database comes back.
//!
//! Both databases refuse to run as root. When the tests run as root (as the
//! README's test command does) the server runs as the packaged service user
//! (`postgres`, `mysql`): the spawned process itself switches user before
//! `exec`, so the PID the handle kills is the database's own, not a wrapper's.
//!
//! ```no_run
//! use palisade_testkit::sql::SqlServer;
//!
//! let postgres = SqlServer::postgres(); // fails the test, with an install hint, without PostgreSQL
//! assert_eq!(postgres.query("SELECT 1 + 1").unwrap(), "2");
//! let url = postgres.url(); // postgres://postgres@127.0.0.1:<port>/postgres
//! # drop(url);
//! ```

use std::fs::File;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{self, ChildProcess};
use crate::tls::Issued;

pub mod pair;

/// How long a server may take to accept queries after it was started
/// (crash recovery included); generous for a loaded 2-core machine.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// PostgreSQL's refusal to start while backends of a killed postmaster
/// still hold its shared memory.
const SHARED_MEMORY_IN_USE: &str = "pre-existing shared memory block";

/// The certificate and key a TLS-only server presents.
#[derive(Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
}

/// Which database a [`SqlServer`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (Debian's `postgresql`).
    Postgres,
    /// MariaDB (Debian's `mariadb-server`), the MySQL-compatible server.
    MariaDb,
}

impl Dialect {
    /// The packaged service user the server runs as when the tests run as
    /// root.
    fn service_user(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MariaDb => "mysql",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgresql",
            Dialect::MariaDb => "mariadb-server",
        }
    }
}

/// A PostgreSQL or MariaDB server this test started.
#[derive(Debug)]
pub struct SqlServer {
    dialect: Dialect,
    port: u16,
    /// The directory with the server's binaries (PostgreSQL keeps them off
    /// `PATH`, under `/usr/lib/postgresql/<version>/bin`).
    bin: PathBuf,
    /// `(uid, gid)` to run as, when the tests run as root.
    run_as: Option<(u32, u32)>,
    /// Extra `-c name=value` settings on PostgreSQL's command line (not in
    /// its data directory, so a base backup of it does not copy them).
    settings: Vec<String>,
    /// TLS only: the certificate and key files the server presents, and
    /// no plain connection accepted.
    tls: Option<TlsFiles>,
    process: Option<ChildProcess>,
    /// Declared last so the process is killed before the data is removed.
    dir: TempDir,
}

/// A PostgreSQL killed with SIGKILL leaves its System V shared memory
/// segment behind (a small one: the rest is `mmap`ed), and a machine has a
/// few thousand of them (`kernel.shmmni`): enough test runs and `initdb`
/// fails with "could not create shared memory segment". So the handle
/// removes the segment of the server it kills; one still attached by a
/// backend that has not yet noticed is destroyed when it detaches.
impl Drop for SqlServer {
    fn drop(&mut self) {
        let segment = match self.dialect {
            Dialect::Postgres => self.shared_memory_id(),
            Dialect::MariaDb => None,
        };
        let _ = self.kill();
        if let Some(id) = segment {
            // `ipcrm` is util-linux's (Debian: essential). Failing leaves the
            // segment, as before; nothing to report to a test.
            let _ = Command::new("ipcrm")
                .args(["-m", &id.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl SqlServer {
    /// The System V shared memory id the postmaster wrote to the 7th line
    /// of `postmaster.pid` (`<key> <id>`).
    fn shared_memory_id(&self) -> Option<i64> {
        let pid_file = std::fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        let line = pid_file.lines().nth(6)?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// A fresh PostgreSQL (`initdb` with trust authentication for loopback)
    /// on a free port, with the default durability: `fsync` and
    /// `synchronous_commit` on.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed (with an install hint) or cannot
    /// start (with the end of its log).
    pub fn postgres() -> SqlServer {
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "{}",
                process::install_hint("PostgreSQL (initdb, postgres)", "postgresql")
            )
        });
        SqlServer::create(Dialect::Postgres, bin, Vec::new())
    }

    /// A fresh PostgreSQL as [`SqlServer::postgres`] gives, with extra
    /// `name=value` settings on its command line (`fsync=off`, for a test
    /// that a careless setting is refused).
    ///
    /// # Panics
    ///
    /// As [`SqlServer::postgres`].
    pub fn postgres_with(settings: &[&str]) -> SqlServer {
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "{}",
                process::install_hint("PostgreSQL (initdb, postgres)", "postgresql")
            )
        });
        let settings = settings
            .iter()
            .map(|setting| (*setting).to_owned())
            .collect();
        SqlServer::create(Dialect::Postgres, bin, settings)
    }

    /// A fresh MariaDB on a free port, without grant tables (any user,
    /// no password: a throwaway test server), InnoDB with its default
    /// durability (`innodb_flush_log_at_trx_commit=1`).
    ///
    /// # Panics
    ///
    /// When MariaDB is not installed (with an install hint) or cannot start.
    pub fn mariadb() -> SqlServer {
        SqlServer::create(Dialect::MariaDb, mariadb_bin(), Vec::new())
    }

    /// A fresh PostgreSQL, as [`SqlServer::postgres`], that accepts only
    /// TLS connections (`hostssl` in `pg_hba.conf`, every plain connection
    /// rejected) and presents `certificate` (e.g.
    /// [`Authority::server`](crate::tls::Authority::server): made for
    /// `127.0.0.1` and `localhost`). A client that connects has used TLS.
    ///
    /// # Panics
    ///
    /// As [`SqlServer::postgres`].
    pub fn postgres_with_tls(certificate: &Issued) -> SqlServer {
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "{}",
                process::install_hint("PostgreSQL (initdb, postgres)", "postgresql")
            )
        });
        SqlServer::create_with_tls(Dialect::Postgres, bin, certificate)
    }

    /// A fresh MariaDB, as [`SqlServer::mariadb`], that accepts only TLS
    /// connections (`require_secure_transport`) and presents
    /// `certificate`.
    ///
    /// # Panics
    ///
    /// As [`SqlServer::mariadb`].
    pub fn mariadb_with_tls(certificate: &Issued) -> SqlServer {
        SqlServer::create_with_tls(Dialect::MariaDb, mariadb_bin(), certificate)
    }

    fn create(dialect: Dialect, bin: PathBuf, settings: Vec<String>) -> SqlServer {
        let mut server = SqlServer::unstarted(dialect, bin, settings);
        server.init_data_dir();
        server.start_on_a_free_port();
        server
    }

    fn create_with_tls(dialect: Dialect, bin: PathBuf, certificate: &Issued) -> SqlServer {
        let mut server = SqlServer::unstarted(dialect, bin, Vec::new());
        server.init_data_dir();
        server.tls = Some(server.write_tls_files(certificate));
        if dialect == Dialect::Postgres {
            // Loopback over TCP with TLS only; the Unix socket stays open
            // to the server's own tools.
            std::fs::write(
                server.data_dir().join("pg_hba.conf"),
                "local all all trust\n\
                 hostssl all all 127.0.0.1/32 trust\n\
                 hostssl all all ::1/128 trust\n\
                 hostnossl all all all reject\n",
            )
            .expect("writing pg_hba.conf in the test's own data directory");
        }
        server.start_on_a_free_port();
        server
    }

    /// Writes the certificate and its key where the server (running as
    /// the service user) can read them, the key readable by it alone, as
    /// both servers demand.
    fn write_tls_files(&self, certificate: &Issued) -> TlsFiles {
        let files = TlsFiles {
            cert: self.dir.path().join("server.crt"),
            key: self.dir.path().join("server.key"),
        };
        std::fs::write(&files.cert, &certificate.cert_pem).expect("writing the certificate");
        std::fs::write(&files.key, &certificate.key_pem).expect("writing the key");
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600))
            .expect("chmod of the key");
        if let Some((uid, gid)) = self.run_as {
            for path in [&files.cert, &files.key] {
                nix::unistd::chown(
                    path,
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                )
                .expect("chown of the test's own file");
            }
        }
        files
    }

    /// A handle with its own temporary directory, no data directory yet and
    /// no process.
    fn unstarted(dialect: Dialect, bin: PathBuf, settings: Vec<String>) -> SqlServer {
        let run_as = nix::unistd::geteuid().is_root().then(|| {
            let user = nix::unistd::User::from_name(dialect.service_user())
                .ok()
                .flatten()
                .unwrap_or_else(|| {
                    panic!(
                        "{}",
                        process::install_hint(
                            &format!("the `{}` user", dialect.service_user()),
                            dialect.package()
                        )
                    )
                });
            (user.uid.as_raw(), user.gid.as_raw())
        });
        let dir = tempfile::Builder::new()
            .prefix(match dialect {
                Dialect::Postgres => "palisade-postgres-",
                Dialect::MariaDb => "palisade-mariadb-",
            })
            .tempdir()
            .expect("creating a temporary directory must work on a test machine");
        if let Some((uid, gid)) = run_as {
            nix::unistd::chown(
                dir.path(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .expect("chown of the test's own temporary directory");
        }
        SqlServer {
            dialect,
            port: 0,
            bin,
            run_as,
            settings,
            tls: None,
            process: None,
            dir,
        }
    }

    /// Starts the server on its (already made) data directory, on a free
    /// port.
    ///
    /// # Panics
    ///
    /// When it does not start after 3 attempts, with the end of its log.
    fn start_on_a_free_port(&mut self) {
        let mut last_error = String::new();
        for _attempt in 0..3 {
            self.port = process::free_port();
            match self.launch() {
                Ok(()) => return,
                // Most likely the port was taken between choosing and binding.
                Err(error) => last_error = error.to_string(),
            }
        }
        panic!(
            "{:?} did not start after 3 attempts: {last_error}",
            self.dialect
        );
    }

    /// The client URL: `postgres://postgres@127.0.0.1:<port>/postgres` or
    /// `mysql://root@127.0.0.1:<port>/test`.
    pub fn url(&self) -> String {
        match self.dialect {
            Dialect::Postgres => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
            Dialect::MariaDb => format!("mysql://root@127.0.0.1:{}/test", self.port),
        }
    }

    /// [`SqlServer::url`] with the strictest TLS verification the
    /// database's driver offers against the CA certificate in `ca_file`:
    /// `sslmode=verify-full&sslrootcert=...` (PostgreSQL),
    /// `ssl-mode=VERIFY_IDENTITY&ssl-ca=...` (MariaDB).
    pub fn verified_url(&self, ca_file: &Path) -> String {
        let ca = ca_file.display();
        match self.dialect {
            Dialect::Postgres => format!("{}?sslmode=verify-full&sslrootcert={ca}", self.url()),
            Dialect::MariaDb => format!("{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}", self.url()),
        }
    }

    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ChildProcess::pid)
    }

    /// Runs one statement with the database's own command-line client and
    /// returns its output, trimmed (rows on lines, columns tab-separated,
    /// no headers).
    pub fn query(&self, sql: &str) -> io::Result<String> {
        let mut command = match self.dialect {
            Dialect::Postgres => {
                let mut command = Command::new(self.client_binary("psql"));
                command
                    .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                    .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-F", "\t"])
                    .arg("-p")
                    .arg(self.port.to_string())
                    .arg("-c")
                    .arg(sql);
                command
            }
            Dialect::MariaDb => {
                let mut command = Command::new(self.client_binary("mariadb"));
                command
                    .args([
                        "--protocol=tcp",
                        "-h",
                        "127.0.0.1",
                        "-u",
                        "root",
                        "-N",
                        "-B",
                    ])
                    .arg(format!("--port={}", self.port));
                if self.tls.is_some() {
                    // Encrypted, not verified: the test's own server.
                    command.arg("--ssl");
                }
                command.args(["-D", "test", "-e"]).arg(sql);
                command
            }
        };
        let output = command.stdin(Stdio::null()).output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "{:?} query {sql:?} failed: {}",
                self.dialect,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it. Its
    /// data directory stays for [`SqlServer::restart`].
    pub fn kill(&mut self) -> io::Result<()> {
        match self.process.take() {
            Some(mut process) => process.kill(),
            None => Ok(()),
        }
    }

    /// Starts the server again on the same port and data directory (after
    /// [`SqlServer::kill`]) and waits until it accepts queries, crash
    /// recovery included, and on PostgreSQL until the killed server's
    /// backends have let go of its shared memory.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                // After a kill -9 of the postmaster, its backends live on
                // until they notice, holding the shared memory; a start in
                // that moment refuses. They are gone within milliseconds.
                Err(error)
                    if self.dialect == Dialect::Postgres
                        && error.to_string().contains(SHARED_MEMORY_IN_USE)
                        && Instant::now() < deadline =>
                {
                    self.kill()?;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn client_binary(&self, name: &str) -> PathBuf {
        process::find_binary(name).unwrap_or_else(|| self.bin.join(name))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("db")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// A command that runs as the service user when the tests run as root.
    fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut command = Command::new(program.as_ref());
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        command
    }

    fn init_data_dir(&self) {
        let data = self.data_dir();
        let mut command = match self.dialect {
            Dialect::Postgres => {
                let mut command = self.command(self.bin.join("initdb"));
                command
                    .arg("-D")
                    .arg(&data)
                    .args(["-A", "trust", "-U", "postgres", "--no-sync"]);
                command
            }
            Dialect::MariaDb => {
                let mut command = self.command(self.client_binary("mariadb-install-db"));
                command
                    .arg(format!("--datadir={}", data.display()))
                    .arg(format!("--tmpdir={}", self.dir.path().display()))
                    .arg("--auth-root-authentication-method=normal");
                command
            }
        };
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run the {:?} initialiser: {e}", self.dialect));
        assert!(
            output.status.success(),
            "initialising a {:?} data directory failed: {}{}",
            self.dialect,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn launch(&mut self) -> io::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = match self.dialect {
            Dialect::Postgres => {
                let mut command = self.command(self.bin.join("postgres"));
                command
                    .arg("-D")
                    .arg(self.data_dir())
                    .arg("-p")
                    .arg(self.port.to_string())
                    .arg("-k")
                    .arg(self.dir.path())
                    .args(["-c", "listen_addresses=127.0.0.1"]);
                for setting in &self.settings {
                    command.arg("-c").arg(setting);
                }
                if let Some(tls) = &self.tls {
                    command
                        .args(["-c", "ssl=on"])
                        .arg("-c")
                        .arg(format!("ssl_cert_file={}", tls.cert.display()))
                        .arg("-c")
                        .arg(format!("ssl_key_file={}", tls.key.display()));
                }
                command
            }
            Dialect::MariaDb => {
                let mut command = self.command(self.bin.join("mariadbd"));
                command
                    .arg("--no-defaults")
                    .arg(format!("--datadir={}", self.data_dir().display()))
                    // Temporary tables go to the server's own directory, not
                    // the /tmp every other server on the machine shares:
                    // there, concurrent bootstraps were seen to lose each
                    // other's temporary tables.
                    .arg(format!("--tmpdir={}", self.dir.path().display()))
                    .arg(format!("--port={}", self.port))
                    .arg(format!(
                        "--socket={}",
                        self.dir.path().join("sock").display()
                    ))
                    .arg(format!(
                        "--pid-file={}",
                        self.dir.path().join("pid").display()
                    ))
                    .args(["--bind-address=127.0.0.1", "--skip-grant-tables"])
                    .args(["--skip-name-resolve", "--innodb-flush-log-at-trx-commit=1"]);
                if let Some(tls) = &self.tls {
                    command
                        .arg(format!("--ssl-cert={}", tls.cert.display()))
                        .arg(format!("--ssl-key={}", tls.key.display()))
                        .arg("--require-secure-transport=ON");
                }
                command
            }
        };
        command.stdout(log.try_clone()?).stderr(log);
        let name = format!("{:?}", self.dialect);
        let process = ChildProcess::spawn(&name, &mut command, Some(&self.log_path()))?;
        self.process = Some(process);
        self.wait_ready()
    }

    /// Waits until the server answers a query. There is no event to wait
    /// on from outside the process, so poll with a short, bounded period.
    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let running = self.process.as_mut().is_some_and(ChildProcess::is_running);
            if !running {
                return Err(io::Error::other(format!(
                    "{:?} exited while starting:\n{}",
                    self.dialect,
                    self.log_tail()
                )));
            }
            match self.query("SELECT 1") {
                Ok(answer) if answer == "1" => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(answer) => return Err(io::Error::other(format!("SELECT 1 gave {answer:?}"))),
                Err(error) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{error}\n{}", self.log_tail()),
                    ));
                }
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }
}

/// The directory of MariaDB's server binary.
///
/// # Panics
///
/// When MariaDB is not installed, with an install hint.
fn mariadb_bin() -> PathBuf {
    let daemon = ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .or_else(|| process::find_binary("mariadbd"))
        .unwrap_or_else(|| {
            panic!(
                "{}",
                process::install_hint("MariaDB (mariadbd)", "mariadb-server")
            )
        });
    daemon
        .parent()
        .expect("a binary's path has a parent")
        .to_path_buf()
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `postgres` in it.
fn postgres_bin() -> Option<PathBuf> {
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survives_a_crash(mut server: SqlServer) {
        server
            .query("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
            .unwrap();
        server.query("INSERT INTO t VALUES (1, 42)").unwrap();
        let port = server.port();
        let pid = server.pid().expect("running");
        server.kill().unwrap();
        assert!(server.query("SELECT 1").is_err(), "killed, yet answering");
        server.restart().unwrap();
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), Some(pid));
        // A committed row is still there after kill -9 and crash recovery.
        assert_eq!(server.query("SELECT v FROM t WHERE k = 1").unwrap(), "42");
    }

    #[test]
    fn postgres_starts_answers_and_recovers_after_kill_9() {
        let server = SqlServer::postgres();
        assert!(server.url().starts_with("postgres://postgres@127.0.0.1:"));
        assert_eq!(server.query("SHOW synchronous_commit").unwrap(), "on");
        assert_eq!(server.query("SHOW fsync").unwrap(), "on");
        survives_a_crash(server);
    }

    #[test]
    fn mariadb_starts_answers_and_recovers_after_kill_9() {
        let server = SqlServer::mariadb();
        assert!(server.url().starts_with("mysql://root@127.0.0.1:"));
        assert_eq!(
            server
                .query("SELECT @@innodb_flush_log_at_trx_commit")
                .unwrap(),
            "1"
        );
        survives_a_crash(server);
    }

    #[test]
    fn postgres_restarts_while_a_backend_of_the_killed_server_still_runs() {
        let mut server = SqlServer::postgres();
        // A CPU-bound query: its backend notices the postmaster's death only
        // when the query ends, and holds the shared memory until then.
        let mut busy = Command::new(server.client_binary("psql"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-X"])
            .arg("-p")
            .arg(server.port().to_string())
            .arg("-c")
            .arg("SELECT count(*) FROM generate_series(1, 40000000)")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql runs");
        let running = Instant::now() + READY_TIMEOUT;
        while server
            .query(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE '%generate_series(1, 40000000)%' AND pid <> pg_backend_pid()",
            )
            .unwrap()
            != "1"
        {
            assert!(Instant::now() < running, "the busy query never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.kill().unwrap();
        server
            .restart()
            .expect("a restart waits for the old backend to let go of the shared memory");
        assert_eq!(server.query("SELECT 1").unwrap(), "1");
        let _ = busy.kill();
        let _ = busy.wait();
    }

    #[test]
    fn tls_only_servers_answer_over_tls_and_refuse_plain_connections() {
        let authority = crate::tls::Authority::new("palisade test CA");
        let postgres = SqlServer::postgres_with_tls(&authority.server());
        assert_eq!(
            postgres
                .query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .unwrap(),
            "t"
        );
        let plain = Command::new(postgres.client_binary("psql"))
            .arg(format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
                postgres.port()
            ))
            .args(["-X", "-c", "SELECT 1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!plain.status.success(), "a plain connection was accepted");

        let mariadb = SqlServer::mariadb_with_tls(&authority.server());
        let cipher = mariadb
            .query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            .unwrap();
        assert!(cipher.len() > "Ssl_cipher".len() + 1, "{cipher:?}");
    }

    #[test]
    fn a_failing_statement_is_an_error_with_the_servers_words() {
        let server = SqlServer::postgres();
        let error = server.query("SELECT * FROM no_such_table").unwrap_err();
        assert!(error.to_string().contains("no_such_table"), "{error}");
    }
}
