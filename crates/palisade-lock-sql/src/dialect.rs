//! Where PostgreSQL and MariaDB differ: the clock expression, column types,
//! "insert if missing", and placeholders. Everything else is one SQL text
//! for both, written with `?` placeholders.

/// Which database the lock tables live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL: waiters are woken with `LISTEN`/`NOTIFY`.
    Postgres,
    /// MariaDB (or MySQL): waiters re-check with a bounded back-off.
    MariaDb,
}

impl Dialect {
    /// The dialect a URL names: `postgres://`/`postgresql://` or `mysql://`/`mariadb://`.
    pub fn from_url(url: &str) -> Option<Dialect> {
        let scheme = url.split_once("://")?.0.to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::MariaDb),
            _ => None,
        }
    }

    /// The backend name in errors and logs.
    pub fn backend(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MariaDb => "mariadb",
        }
    }

    /// The database's own clock in microseconds since the Unix epoch. Every
    /// expiry is computed and compared with this, never with a client's
    /// clock.
    fn now_us(self) -> &'static str {
        match self {
            // clock_timestamp(), not now(): now() is the transaction's start,
            // which can lie far back when the transaction waited for a row lock.
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
            Dialect::MariaDb => "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)",
        }
    }

    /// A lock name column: compared byte for byte (MariaDB's default
    /// collations fold case and ignore trailing spaces).
    fn name_type(self) -> &'static str {
        match self {
            Dialect::Postgres => "TEXT",
            Dialect::MariaDb => "VARBINARY(512)",
        }
    }

    fn serial_key(self) -> &'static str {
        match self {
            Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
            Dialect::MariaDb => "BIGINT AUTO_INCREMENT PRIMARY KEY",
        }
    }

    /// Rewrites `?` placeholders for the dialect (`$1`, `$2`, … on
    /// PostgreSQL) and substitutes `{now}` and `{name}`.
    fn render(self, template: &str) -> String {
        let text = template
            .replace("{now}", self.now_us())
            .replace("{name}", self.name_type())
            .replace("{serial}", self.serial_key());
        match self {
            Dialect::MariaDb => text,
            Dialect::Postgres => {
                let mut out = String::with_capacity(text.len() + 8);
                let mut index = 0;
                for ch in text.chars() {
                    if ch == '?' {
                        index += 1;
                        out.push('$');
                        out.push_str(&index.to_string());
                    } else {
                        out.push(ch);
                    }
                }
                out
            }
        }
    }
}

/// The schema version this code creates and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The `pg_advisory_xact_lock` key of the lock tables' migration (the
/// storage engine and the SQL fence use others).
const MIGRATION_LOCK: i64 = 0x7061_6c69_7364_6502;

/// The channel PostgreSQL waiters listen on; the payload is the lock name.
pub(crate) const CHANNEL: &str = "palisade_lock";

/// Every statement the backend runs, rendered once per client.
#[derive(Debug)]
pub(crate) struct Statements {
    /// PostgreSQL only: makes first-time migrations of several clients
    /// take turns (concurrent `CREATE TABLE IF NOT EXISTS` can fail there
    /// with "already exists"); MariaDB's metadata locks already do.
    pub(crate) serialise_migration: Option<String>,
    pub(crate) create_tables: Vec<String>,
    pub(crate) insert_schema_version: String,
    pub(crate) schema_version: String,
    pub(crate) now: String,
    pub(crate) insert_lock: String,
    pub(crate) lock_row: String,
    /// MariaDB only: `lock_row` that also reads the clock, one round trip
    /// instead of two. On MariaDB the select list of a locking read is
    /// evaluated after the row lock is granted, so the clock is read after
    /// any wait; PostgreSQL may compute it before the wait (its row lock is
    /// taken above the scan), so it keeps the separate `now`.
    pub(crate) lock_row_now: Option<String>,
    pub(crate) update_lock: String,
    pub(crate) lock_sessions: String,
    pub(crate) holders: String,
    pub(crate) waiters: String,
    pub(crate) delete_holder: String,
    pub(crate) delete_holder_by_token: String,
    pub(crate) end_session: String,
    pub(crate) insert_holder: String,
    pub(crate) insert_waiter: String,
    pub(crate) delete_waiter: String,
    pub(crate) extend_own_session: String,
    pub(crate) notify: Option<String>,
    /// PostgreSQL only: a grant's four writes (lock row, holder row, own
    /// queue entry, own lease) in one statement, one round trip.
    pub(crate) grant_writes: Option<String>,
    /// PostgreSQL only: a release's deletes and its `NOTIFY` in one
    /// statement; returns the holder rows deleted.
    pub(crate) release_notify: Option<String>,
    pub(crate) open_session: String,
    pub(crate) renew_session: String,
    pub(crate) expire_session: String,
    pub(crate) close_session: String,
    pub(crate) forget_sessions: String,
    pub(crate) live_check: String,
    pub(crate) queued_ahead: String,
    /// Inspection: the holder rows of a lock with their sessions.
    pub(crate) inspect_holders: String,
    /// Inspection: the lock row's lock-delay and the database's clock.
    pub(crate) inspect_lock: String,
    /// Inspection: every name held, queued for or in a lock-delay.
    pub(crate) active_names: String,
    /// Forced release: the holder row with a given generation.
    pub(crate) force_release: String,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect) -> Statements {
        let r = |template: &str| dialect.render(template);
        Statements {
            serialise_migration: match dialect {
                Dialect::Postgres => {
                    Some(format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
                }
                Dialect::MariaDb => None,
            },
            create_tables: vec![
                r(
                    "CREATE TABLE IF NOT EXISTS palisade_schema (id INT PRIMARY KEY, version BIGINT NOT NULL)",
                ),
                r("CREATE TABLE IF NOT EXISTS palisade_locks (\
                    name {name} NOT NULL PRIMARY KEY, \
                    generation BIGINT NOT NULL, \
                    delay_until_us BIGINT NOT NULL)"),
                r("CREATE TABLE IF NOT EXISTS palisade_sessions (\
                    id VARCHAR(64) NOT NULL PRIMARY KEY, \
                    expires_at_us BIGINT NOT NULL, \
                    lock_delay_us BIGINT NOT NULL, \
                    ended BIGINT NOT NULL)"),
                r("CREATE TABLE IF NOT EXISTS palisade_holders (\
                    name {name} NOT NULL, \
                    session_id VARCHAR(64) NOT NULL, \
                    mode VARCHAR(16) NOT NULL, \
                    generation BIGINT NOT NULL, \
                    token BIGINT NOT NULL, \
                    PRIMARY KEY (name, session_id))"),
                r("CREATE TABLE IF NOT EXISTS palisade_waiters (\
                    id {serial}, \
                    name {name} NOT NULL, \
                    session_id VARCHAR(64) NOT NULL, \
                    mode VARCHAR(16) NOT NULL)"),
                r(
                    "CREATE INDEX IF NOT EXISTS palisade_waiters_by_name ON palisade_waiters (name, id)",
                ),
            ],
            insert_schema_version: r(match dialect {
                Dialect::Postgres => {
                    "INSERT INTO palisade_schema (id, version) VALUES (1, ?) ON CONFLICT (id) DO NOTHING"
                }
                Dialect::MariaDb => {
                    "INSERT IGNORE INTO palisade_schema (id, version) VALUES (1, ?)"
                }
            }),
            schema_version: r("SELECT version FROM palisade_schema WHERE id = 1"),
            now: r("SELECT {now}"),
            insert_lock: r(match dialect {
                Dialect::Postgres => {
                    "INSERT INTO palisade_locks (name, generation, delay_until_us) VALUES (?, 0, 0) \
                     ON CONFLICT (name) DO NOTHING"
                }
                Dialect::MariaDb => {
                    "INSERT IGNORE INTO palisade_locks (name, generation, delay_until_us) VALUES (?, 0, 0)"
                }
            }),
            lock_row: r(
                "SELECT generation, delay_until_us FROM palisade_locks WHERE name = ? FOR UPDATE",
            ),
            lock_row_now: match dialect {
                Dialect::Postgres => None,
                Dialect::MariaDb => Some(r(
                    "SELECT generation, delay_until_us, {now} FROM palisade_locks WHERE name = ? FOR UPDATE",
                )),
            },
            update_lock: r(
                "UPDATE palisade_locks SET generation = ?, delay_until_us = ? WHERE name = ?",
            ),
            // In id order, so two grants never wait for each other's session
            // rows in opposite orders.
            lock_sessions: r(
                "SELECT id, expires_at_us, lock_delay_us, ended FROM palisade_sessions \
                 WHERE id = ? OR id IN (SELECT session_id FROM palisade_holders WHERE name = ?) \
                 ORDER BY id FOR UPDATE",
            ),
            holders: r("SELECT session_id, mode, generation FROM palisade_holders WHERE name = ?"),
            waiters: r(
                "SELECT w.id, w.session_id, w.mode, s.expires_at_us, s.ended \
                 FROM palisade_waiters w LEFT JOIN palisade_sessions s ON s.id = w.session_id \
                 WHERE w.name = ? ORDER BY w.id",
            ),
            delete_holder: r("DELETE FROM palisade_holders WHERE name = ? AND session_id = ?"),
            delete_holder_by_token: r(
                "DELETE FROM palisade_holders WHERE name = ? AND session_id = ? AND token = ?",
            ),
            end_session: r("UPDATE palisade_sessions SET ended = 1 WHERE id = ?"),
            insert_holder: r(
                "INSERT INTO palisade_holders (name, session_id, mode, generation, token) \
                 VALUES (?, ?, ?, ?, ?)",
            ),
            insert_waiter: r(
                "INSERT INTO palisade_waiters (name, session_id, mode) VALUES (?, ?, ?) RETURNING id",
            ),
            delete_waiter: r("DELETE FROM palisade_waiters WHERE id = ?"),
            extend_own_session: r(
                "UPDATE palisade_sessions SET expires_at_us = {now} + ? WHERE id = ?",
            ),
            notify: match dialect {
                Dialect::Postgres => Some(r(&format!("SELECT pg_notify('{CHANNEL}', ?)"))),
                Dialect::MariaDb => None,
            },
            // Data-modifying CTEs all run, each exactly once, whether or not
            // the main query reads them; they touch different tables, and
            // every row they change is already locked by this transaction
            // (the lock row, the requester's session row) or its own.
            grant_writes: match dialect {
                Dialect::Postgres => Some(r("WITH granted AS (\
                       UPDATE palisade_locks SET generation = ?, delay_until_us = ? WHERE name = ?), \
                     held AS (\
                       INSERT INTO palisade_holders (name, session_id, mode, generation, token) \
                       VALUES (?, ?, ?, ?, ?)), \
                     dequeued AS (DELETE FROM palisade_waiters WHERE id = ?), \
                     extended AS (\
                       UPDATE palisade_sessions SET expires_at_us = {now} + ? WHERE id = ?) \
                     SELECT 1")),
                Dialect::MariaDb => None,
            },
            // `notified` is read so that it runs (a plain SELECT in a CTE
            // runs only when referenced); the notification is sent at commit.
            release_notify: match dialect {
                Dialect::Postgres => Some(r(&format!(
                    "WITH released AS (\
                       DELETE FROM palisade_holders WHERE name = ? AND session_id = ? AND token = ? \
                       RETURNING 1), \
                     dequeued AS (DELETE FROM palisade_waiters WHERE id = ?), \
                     notified AS (SELECT pg_notify('{CHANNEL}', ?)) \
                     SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notified)"
                ))),
                Dialect::MariaDb => None,
            },
            open_session: r(
                "INSERT INTO palisade_sessions (id, expires_at_us, lock_delay_us, ended) \
                 VALUES (?, {now} + ?, ?, 0)",
            ),
            // A session the database already saw expire (or that a grant
            // declared ended) can never come back: someone else may have
            // the lock by now.
            renew_session: r("UPDATE palisade_sessions SET expires_at_us = {now} + ? \
                 WHERE id = ? AND ended = 0 AND expires_at_us > {now}"),
            expire_session: r(
                "UPDATE palisade_sessions SET expires_at_us = {now}, ended = 1 \
                 WHERE id = ? AND ended = 0",
            ),
            close_session: r(
                "UPDATE palisade_sessions SET expires_at_us = {now}, lock_delay_us = 0, ended = 1 \
                 WHERE id = ? AND ended = 0",
            ),
            forget_sessions: r(
                "DELETE FROM palisade_sessions WHERE expires_at_us + lock_delay_us < {now} - ? \
                 AND NOT EXISTS (SELECT 1 FROM palisade_holders h WHERE h.session_id = palisade_sessions.id) \
                 AND NOT EXISTS (SELECT 1 FROM palisade_waiters w WHERE w.session_id = palisade_sessions.id)",
            ),
            live_check: r("SELECT h.mode, s.expires_at_us, s.ended, {now} \
                 FROM palisade_holders h JOIN palisade_sessions s ON s.id = h.session_id \
                 WHERE h.name = ? AND h.generation = ?"),
            // The live waiters a requester in mode `?` with queue entry `?`
            // must let go first (the rule `decide` applies): any, for an
            // exclusive requester; exclusive ones, for a shared requester.
            queued_ahead: r("SELECT count(*) FROM palisade_waiters w \
                 JOIN palisade_sessions s ON s.id = w.session_id \
                 WHERE w.name = ? AND w.id < ? AND (? = 'exclusive' OR w.mode = 'exclusive') \
                 AND s.ended = 0 AND s.expires_at_us > {now}"),
            inspect_holders: r(
                "SELECT h.mode, h.generation, h.session_id, s.expires_at_us, s.lock_delay_us, s.ended, {now} \
                 FROM palisade_holders h LEFT JOIN palisade_sessions s ON s.id = h.session_id \
                 WHERE h.name = ? ORDER BY h.generation",
            ),
            inspect_lock: r("SELECT delay_until_us, {now} FROM palisade_locks WHERE name = ?"),
            active_names: r("SELECT name FROM palisade_holders \
                 UNION SELECT name FROM palisade_waiters \
                 UNION SELECT name FROM palisade_locks WHERE delay_until_us > {now}"),
            force_release: r("DELETE FROM palisade_holders WHERE name = ? AND generation = ?"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered() {
        assert_eq!(
            Dialect::Postgres.render("UPDATE t SET a = ? WHERE b = ? AND c = ?"),
            "UPDATE t SET a = $1 WHERE b = $2 AND c = $3"
        );
        assert_eq!(Dialect::MariaDb.render("SELECT ?"), "SELECT ?");
    }

    #[test]
    fn url_schemes_pick_the_dialect() {
        assert_eq!(
            Dialect::from_url("postgres://u@h/db"),
            Some(Dialect::Postgres)
        );
        assert_eq!(Dialect::from_url("postgresql://h"), Some(Dialect::Postgres));
        assert_eq!(
            Dialect::from_url("mysql://root@h/test"),
            Some(Dialect::MariaDb)
        );
        assert_eq!(Dialect::from_url("mariadb://h"), Some(Dialect::MariaDb));
        assert_eq!(Dialect::from_url("sqlite://x"), None);
        assert_eq!(Dialect::from_url("no scheme"), None);
    }
}
