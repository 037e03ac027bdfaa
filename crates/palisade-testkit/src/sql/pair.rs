//! A PostgreSQL primary with a synchronous standby, streaming on loopback,
//! for failover tests.
//!
//! The primary runs with `synchronous_standby_names` naming the standby, so
//! a commit (`synchronous_commit` on) returns only once the standby has the
//! commit record on disk: a row the primary acknowledged survives the loss
//! of the primary when the standby is promoted. The standby is a
//! `pg_basebackup -R` copy of the primary. The replication settings are on
//! the primary's command line, not in its data directory, so the copy does
//! not inherit them: once promoted, the standby commits on its own instead
//! of waiting for a standby of its own that does not exist.
//!
//! ```no_run
//! use palisade_testkit::sql::pair::PostgresPair;
//!
//! let mut pair = PostgresPair::start(); // streaming, and synchronous
//! pair.primary().query("CREATE TABLE t (k INT)").unwrap();
//! pair.kill_primary().unwrap(); // the primary's machine is gone
//! let took = pair.promote_standby().unwrap();
//! let url = pair.standby().url(); // the new primary
//! # drop((took, url));
//! ```

use std::io;
use std::time::{Duration, Instant};

use super::{Dialect, READY_TIMEOUT, SqlServer, postgres_bin};
use crate::process::{self, Signal};

/// The standby's name: its `cluster_name`, which its WAL receiver reports
/// as `application_name`, and the primary's `synchronous_standby_names`.
const STANDBY_NAME: &str = "palisade_standby";

/// How long a killed server's processes, or a shutdown, may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A PostgreSQL primary and its synchronous streaming standby, both started
/// by this test; every process of both is killed (SIGKILL, by PID) when the
/// pair drops.
#[derive(Debug)]
pub struct PostgresPair {
    primary: SqlServer,
    standby: SqlServer,
}

impl PostgresPair {
    /// Starts a primary, makes the standby from a base backup of it, starts
    /// the standby, and waits until the primary reports it streaming with
    /// `sync_state = 'sync'`.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed (with an install hint), or a server
    /// does not start or the standby does not become synchronous (with the
    /// end of the server's log).
    pub fn start() -> PostgresPair {
        let bin = postgres_bin().unwrap_or_else(|| {
            panic!(
                "{}",
                process::install_hint("PostgreSQL (initdb, postgres, pg_basebackup)", "postgresql")
            )
        });
        let mut primary = SqlServer::unstarted(
            Dialect::Postgres,
            bin.clone(),
            vec![format!("synchronous_standby_names={STANDBY_NAME}")],
        );
        primary.init_data_dir();
        primary.start_on_a_free_port();
        let mut standby = SqlServer::unstarted(
            Dialect::Postgres,
            bin,
            vec![format!("cluster_name={STANDBY_NAME}")],
        );
        standby.base_backup_of(&primary);
        standby.start_on_a_free_port();
        let pair = PostgresPair { primary, standby };
        if let Err(error) = pair.wait_synchronous() {
            panic!(
                "the standby never became synchronous: {error}\n--- primary ---\n{}\n--- standby ---\n{}",
                pair.primary.log_tail(),
                pair.standby.log_tail()
            );
        }
        pair
    }

    /// The primary (after [`PostgresPair::kill_primary`], a server that is
    /// down).
    pub fn primary(&self) -> &SqlServer {
        &self.primary
    }

    /// The standby (after [`PostgresPair::promote_standby`], the new
    /// primary).
    pub fn standby(&self) -> &SqlServer {
        &self.standby
    }

    /// The process ids of every process of both servers now running: the
    /// postmasters and their children (backends, WAL sender and receiver,
    /// checkpointer, ...).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.primary.process_tree();
        pids.extend(self.standby.process_tree());
        pids
    }

    /// Kills the primary the way a lost machine stops: SIGKILL, by PID, to
    /// the postmaster and every one of its children at once, so no orphaned
    /// backend or WAL sender carries on after it. Returns once all of them
    /// have ended.
    pub fn kill_primary(&mut self) -> io::Result<()> {
        self.primary.kill_process_tree()
    }

    /// Promotes the standby (`pg_promote`) and waits until it has left
    /// recovery and takes writes. Returns how long the promotion took.
    pub fn promote_standby(&mut self) -> io::Result<Duration> {
        let started = Instant::now();
        let answer = self.standby.query("SELECT pg_promote(wait => false)")?;
        if answer != "t" {
            return Err(io::Error::other(format!("pg_promote answered {answer:?}")));
        }
        // The end of recovery happens inside the server; from outside the
        // only way to see it is to ask, with a short, bounded period.
        let deadline = started + READY_TIMEOUT;
        loop {
            match self.standby.query("SELECT pg_is_in_recovery()") {
                Ok(answer) if answer == "f" => return Ok(started.elapsed()),
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(answer) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "still in recovery ({answer:?}) {READY_TIMEOUT:?} after pg_promote:\n{}",
                            self.standby.log_tail()
                        ),
                    ));
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Shuts both servers down cleanly (fast shutdown, primary first so its
    /// WAL sender hands the shutdown checkpoint to the standby) and checks
    /// each exited with success and left no process behind.
    pub fn stop(mut self) -> io::Result<()> {
        self.primary.shut_down()?;
        self.standby.shut_down()
    }

    fn wait_synchronous(&self) -> io::Result<()> {
        let query = format!(
            "SELECT state || ' ' || sync_state FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}'"
        );
        // Streaming starts inside the two servers: ask the primary, with a
        // short, bounded period.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answer = self.primary.query(&query)?;
            if answer == "streaming sync" {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("pg_stat_replication says {answer:?} after {READY_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PostgresPair {
    fn drop(&mut self) {
        // The postmasters alone would die with their handles; their children
        // would outlive them for a moment, in a directory being removed.
        let _ = self.standby.kill_process_tree();
        let _ = self.primary.kill_process_tree();
    }
}

impl SqlServer {
    /// Fills this (not yet started) server's data directory with
    /// `pg_basebackup -R` from `primary`: a standby that streams from it.
    fn base_backup_of(&self, primary: &SqlServer) {
        let output = self
            .command(self.bin.join("pg_basebackup"))
            .args(["-h", "127.0.0.1", "-U", "postgres"])
            .arg("-p")
            .arg(primary.port().to_string())
            .arg("-D")
            .arg(self.data_dir())
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_basebackup: {e}"));
        assert!(
            output.status.success(),
            "pg_basebackup failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The postmaster and its children, while it runs.
    fn process_tree(&self) -> Vec<u32> {
        let Some(postmaster) = self.pid() else {
            return Vec::new();
        };
        let mut pids = vec![postmaster];
        pids.extend(process::children_of(postmaster));
        pids
    }

    /// SIGKILL to the postmaster and all its children (a postmaster killed
    /// alone leaves backends that run on until they notice), then waits
    /// until every one has ended.
    fn kill_process_tree(&mut self) -> io::Result<()> {
        let Some(postmaster) = self.pid() else {
            return Ok(());
        };
        // Stopped, the postmaster forks no child the list below would miss.
        process::send_signal(postmaster, Signal::SIGSTOP)?;
        let children = process::children_of(postmaster);
        for child in &children {
            // A child may have ended by itself meanwhile: not an error.
            let _ = process::send_signal(*child, Signal::SIGKILL);
        }
        self.kill()?;
        process::wait_gone(&children, STOP_TIMEOUT)
    }

    /// Fast shutdown (SIGINT): PostgreSQL ends its sessions, writes a
    /// shutdown checkpoint and exits once all its children have. Fails when
    /// it does not exit with success in time.
    fn shut_down(&mut self) -> io::Result<()> {
        let Some(mut postmaster) = self.process.take() else {
            return Ok(());
        };
        let children = process::children_of(postmaster.pid());
        postmaster.signal(Signal::SIGINT)?;
        // A process has no exit event std can wait on with a bound: poll.
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = postmaster.child_mut().try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "PostgreSQL did not shut down in {STOP_TIMEOUT:?}:\n{}",
                        self.log_tail()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !status.success() {
            return Err(io::Error::other(format!(
                "PostgreSQL shut down with {status}:\n{}",
                self.log_tail()
            )));
        }
        // The postmaster exits only after its children: none may be left.
        process::wait_gone(&children, STOP_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standby_state(pair: &PostgresPair) -> String {
        pair.primary()
            .query(&format!(
                "SELECT state || ' ' || sync_state FROM pg_stat_replication \
                 WHERE application_name = '{STANDBY_NAME}'"
            ))
            .unwrap()
    }

    /// A session busy in a loop of its own, as a long query is: its backend
    /// notices the postmaster's death only between queries, so it outlives
    /// a postmaster killed alone. Returns the psql client (ended on drop)
    /// and the backend's process id. The loop ends by itself after 120 s.
    fn busy_backend(server: &SqlServer) -> (process::ChildProcess, u32) {
        let mut command = std::process::Command::new(server.client_binary("psql"));
        command
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-X"])
            .arg("-p")
            .arg(server.port().to_string())
            .args([
                "-c",
                "DO $$ BEGIN LOOP PERFORM 'palisade_busy'; END LOOP; END $$",
            ])
            .env("PGOPTIONS", "-c statement_timeout=120s")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let client = process::ChildProcess::spawn("psql", &mut command, None).unwrap();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answer = server
                .query(
                    "SELECT pid FROM pg_stat_activity \
                     WHERE query LIKE '%palisade_busy%' AND pid <> pg_backend_pid()",
                )
                .unwrap();
            if let Ok(pid) = answer.parse() {
                return (client, pid);
            }
            assert!(Instant::now() < deadline, "the busy session never started");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_committed_row_survives_kill_9_of_the_primary_and_promotion() {
        let mut pair = PostgresPair::start();
        assert_eq!(standby_state(&pair), "streaming sync");
        assert_eq!(
            pair.primary().query("SHOW synchronous_commit").unwrap(),
            "on"
        );
        assert_eq!(
            pair.standby().query("SELECT pg_is_in_recovery()").unwrap(),
            "t"
        );
        pair.primary()
            .query("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
            .unwrap();
        pair.primary()
            .query("INSERT INTO t VALUES (1, 42)")
            .unwrap();

        let (_client, busy) = busy_backend(pair.primary());
        let primary_pids = pair.primary.process_tree();
        assert!(primary_pids.contains(&busy));
        pair.kill_primary().unwrap();
        // Nothing of the primary runs on, not even a backend mid-query.
        let left: Vec<u32> = primary_pids
            .into_iter()
            .filter(|pid| !process::is_gone(*pid))
            .collect();
        assert!(left.is_empty(), "left running after the kill: {left:?}");
        assert!(
            pair.primary().query("SELECT 1").is_err(),
            "killed, yet answering"
        );

        let took = pair.promote_standby().unwrap();
        assert!(took < READY_TIMEOUT);
        assert_eq!(
            pair.standby().query("SELECT pg_is_in_recovery()").unwrap(),
            "f"
        );
        // Acknowledged by the primary, so on the standby's disk: there.
        assert_eq!(
            pair.standby().query("SELECT v FROM t WHERE k = 1").unwrap(),
            "42"
        );
        // The promoted standby commits on its own: no synchronous standby of
        // its own to wait for.
        assert_eq!(
            pair.standby()
                .query("SHOW synchronous_standby_names")
                .unwrap(),
            ""
        );
        pair.standby()
            .query("INSERT INTO t VALUES (2, 43)")
            .unwrap();
        assert_eq!(pair.standby().query("SELECT count(*) FROM t").unwrap(), "2");
        assert!(
            pair.standby()
                .url()
                .starts_with("postgres://postgres@127.0.0.1:")
        );
    }

    /// The standby's WAL receiver, found by its process title.
    fn wal_receiver(pair: &PostgresPair) -> u32 {
        pair.standby
            .process_tree()
            .into_iter()
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|title| String::from_utf8_lossy(&title).contains("walreceiver"))
            })
            .expect("a streaming standby runs a WAL receiver")
    }

    #[test]
    fn a_commit_on_the_primary_waits_for_the_standby() {
        let pair = PostgresPair::start();
        pair.primary().query("CREATE TABLE t (k INT)").unwrap();
        let receiver = wal_receiver(&pair);
        process::send_signal(receiver, Signal::SIGSTOP).unwrap();
        // The standby cannot confirm: the commit waits (wait event
        // `SyncRep`) for as long as its WAL receiver is stopped.
        let mut insert = std::process::Command::new(pair.primary().client_binary("psql"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-X"])
            .arg("-p")
            .arg(pair.primary().port().to_string())
            .args(["-c", "INSERT INTO t VALUES (1)"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + READY_TIMEOUT;
        while pair
            .primary()
            .query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            .unwrap()
            != "1"
        {
            let finished = insert.try_wait().unwrap();
            assert!(
                finished.is_none(),
                "the commit returned without the standby: {finished:?}"
            );
            assert!(Instant::now() < deadline, "the commit never waited");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(insert.try_wait().unwrap().is_none(), "committed alone");
        // The receiver goes on: the commit returns, and the row is there.
        process::send_signal(receiver, Signal::SIGCONT).unwrap();
        assert!(insert.wait().unwrap().success());
        assert_eq!(pair.primary().query("SELECT count(*) FROM t").unwrap(), "1");
    }

    #[test]
    fn the_pair_starts_and_stops_cleanly() {
        let pair = PostgresPair::start();
        assert_eq!(standby_state(&pair), "streaming sync");
        pair.primary().query("CREATE TABLE t (k INT)").unwrap();
        let pids = pair.pids();
        // Two postmasters, each with children (a WAL sender, a receiver).
        assert!(pids.len() > 4, "{pids:?}");
        pair.stop().unwrap();
        assert!(pids.iter().all(|pid| process::is_gone(*pid)), "{pids:?}");
    }

    #[test]
    fn no_process_of_the_pair_is_left_after_drop() {
        let pair = PostgresPair::start();
        let (_primary_client, primary_busy) = busy_backend(pair.primary());
        let (_standby_client, standby_busy) = busy_backend(pair.standby());
        let pids = pair.pids();
        assert!(pids.contains(&primary_busy) && pids.contains(&standby_busy));
        drop(pair);
        let left: Vec<u32> = pids
            .into_iter()
            .filter(|pid| !process::is_gone(*pid))
            .collect();
        assert!(left.is_empty(), "left running after drop: {left:?}");
    }
}
