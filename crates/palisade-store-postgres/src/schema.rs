//! The tables, every statement the engine runs, and the versioned
//! migration. `docs/engines.md` quotes the tables; keep the two in step.

use sqlx::{Connection as _, PgConnection};

use crate::OpenError;
use crate::engine::OpenFailure;

/// The schema version this engine creates and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// Calls the write function.
pub(crate) const WRITE: &str = "SELECT o_results, o_h_excl, o_h_shared, o_commit_seq, o_replayed \
    FROM palisade_store_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// The fast path of the commonest write: one put, no idempotency key, by
/// a holder whose generation is already the lock's exclusive mark (every
/// write of a hold after its first). One auto-committed statement, no
/// PL/pgSQL: it locks the mark row (`FOR UPDATE`, so a concurrent raise
/// waits, and under READ COMMITTED the row read is the newest committed
/// version), upserts the value only if `$2` equals `H_excl` and is not
/// below `H_shared` (the rule passes and moves no mark, so the mark row
/// is not rewritten), and takes the commit sequence number under the row
/// lock. Returns no row for a lock never seen; `created` NULL when the
/// generation is not the mark: nothing was written, and the caller runs
/// [`WRITE`], which decides (raise, refusal, first write).
pub(crate) const FAST_PUT: &str = "WITH m AS (\
        SELECT h_excl, h_shared FROM palisade_store_marks WHERE lock_name = $1 FOR UPDATE), \
    w AS (\
        INSERT INTO palisade_store_data (lock_name, key, value) \
        SELECT $1, $3, $4 FROM m \
        WHERE palisade_store_at_mark(m.h_excl, m.h_shared, $2) \
        ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value \
        RETURNING (xmax = 0) AS created) \
    SELECT m.h_excl, m.h_shared, w.created, \
        CASE WHEN w.created IS NOT NULL THEN nextval('palisade_store_commit_seq') END \
    FROM m LEFT JOIN w ON true";

/// [`FAST_PUT`] for a batch of requests on different locks
/// (`crate::batch`), one auto-committed statement: `$1` lock names (no
/// two alike), `$2` generations, `$3` keys, `$4` values, one element per
/// request. Each request's row is decided as [`FAST_PUT`] decides it,
/// on its own lock's marks. Mark rows are locked `SKIP LOCKED`: a row
/// another transaction holds is not waited for (the request goes on
/// alone and waits there), so a batch never waits behind one busy lock,
/// and two batches never deadlock. One row back per request, by its
/// 1-based position: the marks (NULL: the lock never seen, or its row
/// busy), `created` (NULL: nothing written) and the commit number.
pub(crate) const FAST_PUTS: &str = "WITH r AS (\
        SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::bytea[]) \
            WITH ORDINALITY AS r(lock_name, generation, key, value, i)), \
    m AS (\
        SELECT lock_name, h_excl, h_shared FROM palisade_store_marks \
        WHERE lock_name = ANY($1::text[]) FOR UPDATE SKIP LOCKED), \
    w AS (\
        INSERT INTO palisade_store_data (lock_name, key, value) \
        SELECT r.lock_name, r.key, r.value FROM r JOIN m ON m.lock_name = r.lock_name \
        WHERE palisade_store_at_mark(m.h_excl, m.h_shared, r.generation) \
        ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value \
        RETURNING lock_name, (xmax = 0) AS created) \
    SELECT r.i, m.h_excl, m.h_shared, w.created, \
        CASE WHEN w.created IS NOT NULL THEN nextval('palisade_store_commit_seq') END \
    FROM r LEFT JOIN m ON m.lock_name = r.lock_name LEFT JOIN w ON w.lock_name = r.lock_name";

/// Every row the engine keeps, as `(place, key, value)` bytes, from one
/// snapshot (`Engine::dump`, for tests). Lock names hold no NUL, so a NUL
/// separates the parts of a key.
pub(crate) const DUMP: &str = "SELECT place, key, value FROM ( \
    SELECT 'palisade_store_schema' AS place, int8send(version) AS key, ''::bytea AS value \
        FROM palisade_store_schema \
    UNION ALL SELECT 'palisade_store_marks', convert_to(lock_name, 'UTF8'), \
        int8send(h_excl) || int8send(h_shared) || int8send(id_count) FROM palisade_store_marks \
    UNION ALL SELECT 'palisade_store_data', convert_to(lock_name, 'UTF8') || '\\x00'::bytea || key, \
        value FROM palisade_store_data \
    UNION ALL SELECT 'palisade_store_requests', \
        convert_to(lock_name, 'UTF8') || '\\x00'::bytea || convert_to(request_id, 'UTF8'), \
        int8send(slot) || int8send(h_excl) || int8send(h_shared) || int8send(commit_seq) \
        || int4send(length(fingerprint)) || fingerprint || results FROM palisade_store_requests \
    ) AS rows";

/// Serialises first-time migrations of several replicas starting at once
/// (`pg_advisory_xact_lock` key; palisade-fence-sql's fence uses another).
const MIGRATION_LOCK: i64 = 0x7061_6c69_7364_6501;

/// Creates the tables, in order. Every statement is idempotent.
///
/// Marks and generations are `BIGINT`s holding the `u64` bit pattern
/// (values above `i64::MAX` read back negative in `psql`), compared as the
/// numbers they stand for (`palisade_store_u64`), so the full range of
/// [`palisade_core::Generation`] is kept.
const CREATE: &[&str] = &[
    // One row per lock ever admitted. `id_count` numbers the idempotency
    // records of the lock, so the window is cut by number.
    "CREATE TABLE IF NOT EXISTS palisade_store_marks (\
        lock_name TEXT COLLATE \"C\" PRIMARY KEY, \
        h_excl BIGINT NOT NULL, \
        h_shared BIGINT NOT NULL, \
        id_count BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS palisade_store_data (\
        lock_name TEXT COLLATE \"C\" NOT NULL, \
        key BYTEA NOT NULL, \
        value BYTEA NOT NULL, \
        PRIMARY KEY (lock_name, key))",
    "CREATE TABLE IF NOT EXISTS palisade_store_requests (\
        lock_name TEXT COLLATE \"C\" NOT NULL, \
        request_id TEXT COLLATE \"C\" NOT NULL, \
        slot BIGINT NOT NULL, \
        fingerprint BYTEA NOT NULL, \
        results BYTEA NOT NULL, \
        h_excl BIGINT NOT NULL, \
        h_shared BIGINT NOT NULL, \
        commit_seq BIGINT NOT NULL, \
        PRIMARY KEY (lock_name, request_id))",
    "CREATE INDEX IF NOT EXISTS palisade_store_requests_by_slot \
        ON palisade_store_requests (lock_name, slot)",
    // Taken under the lock's mark row, so numbers follow commit order
    // among the writes of one lock (obligation 8 of `Engine`).
    "CREATE SEQUENCE IF NOT EXISTS palisade_store_commit_seq",
    U64_FUNCTION,
    AT_MARK_FUNCTION,
    WRITE_FUNCTION,
    FENCE_FUNCTION,
];

/// A `BIGINT` holding a `u64` bit pattern, as the number it stands for.
///
/// Not `STRICT`, so that PostgreSQL inlines it into the calling statement
/// (a `STRICT` SQL function whose body is a `CASE` cannot be inlined). Not
/// inlined, each call parsed, planned and ran its body as a query of its
/// own: 13 % of PostgreSQL's CPU on the fast path (docs/benchmarks.md). A
/// NULL still gives NULL (`NULL < 0` is not true, `NULL::numeric` is NULL).
/// `CREATE OR REPLACE` changes a database's existing definition on the
/// next open.
const U64_FUNCTION: &str = "CREATE OR REPLACE FUNCTION palisade_store_u64(v BIGINT) \
    RETURNS NUMERIC LANGUAGE sql IMMUTABLE AS \
    $$ SELECT CASE WHEN v < 0 THEN v::numeric + 18446744073709551616 ELSE v::numeric END $$";

/// The fast paths' rule ([`FAST_PUT`], [`FAST_PUTS`]): an exclusive
/// write at generation `g` is admitted and moves no mark when `g` is
/// already `H_excl` and not below `H_shared` (core's rule, `g >=
/// max(H_excl, H_shared)`, with `H_excl = g` unchanged by the raise). One
/// definition for both statements, so core's rule table, run through them
/// (`tests/it/rule.rs`), holds them both, and a broken copy of it fails
/// the table. Inlined by PostgreSQL like [`U64_FUNCTION`] (a plain SQL
/// expression, not `STRICT`); NULL marks give NULL, which admits nothing.
const AT_MARK_FUNCTION: &str = "CREATE OR REPLACE FUNCTION palisade_store_at_mark(\
        m_excl BIGINT, m_shared BIGINT, g BIGINT) \
    RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS \
    $$ SELECT m_excl = g AND palisade_store_u64(m_shared) <= palisade_store_u64(g) $$";

/// The whole write step, one call in its own (auto-committed) transaction,
/// so a write costs one round trip. READ COMMITTED: each statement of the
/// function takes a new snapshot, so everything after the `FOR UPDATE`
/// sees what the previous holder of the row committed.
///
/// Refusals are errors with the engine's own SQLSTATEs (`PS001` stale,
/// detail `h_excl h_shared`; `PS002` CAS mismatch, detail `index hex|-`;
/// `PS003` id reused; `PS004` over the raise cap, detail `h_excl
/// h_shared`): the error aborts the statement's transaction, so nothing of
/// a refused request, not even a new mark row, is kept. A replay returns
/// the record and writes nothing.
///
/// `p_kinds`: 1 put, 2 delete, 3 compare-and-swap (`p_values[i]` NULL:
/// delete; `p_expected[i]` NULL: must be absent). Op results are recorded
/// as `palisade_store::stored::result_byte`s (1 created ... 5 swapped).
///
/// The raise cap (`palisade_core::RaiseCap`, as a
/// `palisade_store::RaiseLimit`): `p_max_raise` NULL is no cap; otherwise
/// a lock whose higher mark is 0 or at least `p_clock_floor` may be raised
/// to `p_clock_limit` (the request's clock plus the lead), any other to
/// its higher mark plus `p_max_raise`; checked after the replay and before
/// the rule, on the marks the row lock holds. The engine suite's
/// `raise_cap` case runs it against `RaiseLimit::check`. (An engine of an
/// earlier version left the nine-argument function beside this one; it
/// stays for replicas of that version until they are upgraded.)
const WRITE_FUNCTION: &str = r#"CREATE OR REPLACE FUNCTION palisade_store_write(
    p_lock TEXT, p_generation BIGINT, p_kinds SMALLINT[], p_keys BYTEA[],
    p_values BYTEA[], p_expected BYTEA[], p_request_id TEXT, p_fingerprint BYTEA,
    p_window BIGINT, p_max_raise BIGINT, p_clock_floor BIGINT, p_clock_limit BIGINT,
    OUT o_results BYTEA, OUT o_h_excl BIGINT, OUT o_h_shared BIGINT,
    OUT o_commit_seq BIGINT, OUT o_replayed BOOLEAN)
LANGUAGE plpgsql AS $fn$
DECLARE
    m_excl BIGINT; m_shared BIGINT; m_count BIGINT;
    r_fingerprint BYTEA;
    cur BYTEA; present BOOLEAN; created BOOLEAN; code INTEGER; highest NUMERIC; allowed NUMERIC;
    n INTEGER := coalesce(array_length(p_keys, 1), 0);
    res BYTEA := ''::bytea;
BEGIN
    SELECT h_excl, h_shared, id_count INTO m_excl, m_shared, m_count
        FROM palisade_store_marks WHERE lock_name = p_lock FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO palisade_store_marks (lock_name, h_excl, h_shared, id_count)
            VALUES (p_lock, 0, 0, 0) ON CONFLICT (lock_name) DO NOTHING;
        SELECT h_excl, h_shared, id_count INTO STRICT m_excl, m_shared, m_count
            FROM palisade_store_marks WHERE lock_name = p_lock FOR UPDATE;
    END IF;
    IF p_request_id IS NOT NULL THEN
        SELECT fingerprint, results, h_excl, h_shared, commit_seq
            INTO r_fingerprint, o_results, o_h_excl, o_h_shared, o_commit_seq
            FROM palisade_store_requests
            WHERE lock_name = p_lock AND request_id = p_request_id;
        IF FOUND THEN
            IF r_fingerprint <> p_fingerprint THEN
                RAISE EXCEPTION 'palisade_store: idempotency key reused' USING ERRCODE = 'PS003';
            END IF;
            o_replayed := true;
            RETURN;
        END IF;
    END IF;
    IF p_max_raise IS NOT NULL THEN
        highest := greatest(palisade_store_u64(m_excl), palisade_store_u64(m_shared));
        IF highest = 0 OR highest >= palisade_store_u64(p_clock_floor) THEN
            allowed := palisade_store_u64(p_clock_limit);
        ELSE
            allowed := least(highest + palisade_store_u64(p_max_raise), 18446744073709551615);
        END IF;
        IF palisade_store_u64(p_generation) > allowed THEN
            RAISE EXCEPTION 'palisade_store: raise too large'
                USING ERRCODE = 'PS004', DETAIL = m_excl || ' ' || m_shared;
        END IF;
    END IF;
    IF palisade_store_u64(p_generation)
        < greatest(palisade_store_u64(m_excl), palisade_store_u64(m_shared)) THEN
        RAISE EXCEPTION 'palisade_store: stale sequencer'
            USING ERRCODE = 'PS001', DETAIL = m_excl || ' ' || m_shared;
    END IF;
    FOR i IN 1..n LOOP
        IF p_kinds[i] = 1 THEN
            -- A put: one statement; `xmax = 0` on the returned row tells a
            -- fresh insert from the update of an existing row.
            INSERT INTO palisade_store_data (lock_name, key, value)
                VALUES (p_lock, p_keys[i], p_values[i])
                ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value
                RETURNING (xmax = 0) INTO created;
            code := CASE WHEN created THEN 1 ELSE 2 END;
        ELSIF p_kinds[i] = 2 THEN
            DELETE FROM palisade_store_data WHERE lock_name = p_lock AND key = p_keys[i];
            code := CASE WHEN FOUND THEN 3 ELSE 4 END;
        ELSE
            SELECT value INTO cur FROM palisade_store_data
                WHERE lock_name = p_lock AND key = p_keys[i];
            present := FOUND;
            IF present <> (p_expected[i] IS NOT NULL) OR (present AND cur <> p_expected[i]) THEN
                RAISE EXCEPTION 'palisade_store: compare-and-swap mismatch' USING ERRCODE = 'PS002',
                    DETAIL = (i - 1) || ' ' || CASE WHEN present THEN encode(cur, 'hex') ELSE '-' END;
            END IF;
            IF p_values[i] IS NULL THEN
                IF present THEN
                    DELETE FROM palisade_store_data WHERE lock_name = p_lock AND key = p_keys[i];
                END IF;
            ELSE
                INSERT INTO palisade_store_data (lock_name, key, value)
                    VALUES (p_lock, p_keys[i], p_values[i])
                    ON CONFLICT (lock_name, key) DO UPDATE SET value = EXCLUDED.value;
            END IF;
            code := 5;
        END IF;
        res := res || set_byte('\x00'::bytea, 0, code);
    END LOOP;
    IF p_request_id IS NOT NULL THEN
        m_count := m_count + 1;
    END IF;
    -- A holder writing again at the mark without an idempotency key moves
    -- nothing: the row stays locked until the commit, but is not rewritten
    -- (no second row version, and its WAL, per write).
    IF m_excl = p_generation AND p_request_id IS NULL THEN
        o_commit_seq := nextval('palisade_store_commit_seq');
    ELSE
        UPDATE palisade_store_marks SET h_excl = p_generation, id_count = m_count
            WHERE lock_name = p_lock
            RETURNING nextval('palisade_store_commit_seq') INTO o_commit_seq;
    END IF;
    IF p_request_id IS NOT NULL THEN
        DELETE FROM palisade_store_requests
            WHERE lock_name = p_lock AND slot <= m_count - p_window;
        INSERT INTO palisade_store_requests
            (lock_name, request_id, slot, fingerprint, results, h_excl, h_shared, commit_seq)
            VALUES (p_lock, p_request_id, m_count, p_fingerprint, res, p_generation,
                    m_shared, o_commit_seq);
    END IF;
    o_results := res;
    o_h_excl := p_generation;
    o_h_shared := m_shared;
    o_replayed := false;
END
$fn$"#;

/// Calls the fence function: a fenced read (`$4` a key) or an admit (`$4`
/// NULL).
pub(crate) const FENCE: &str = "SELECT o_admitted, o_h_excl, o_h_shared, o_value \
    FROM palisade_store_fence($1, $2, $3, $4)";

/// A fenced read or an admit, one call in its own (auto-committed)
/// transaction, as a write is: the mark row is locked, the rule applied,
/// the marks raised and the value read inside PostgreSQL, and the row is
/// released by the commit that ends the call, whether or not the caller is
/// still there to read the answer. A replica paused or cut off mid-request
/// therefore holds no lock's row: done from Rust, between two round trips
/// it held the row until PostgreSQL ended its idle transaction, and every
/// other replica's writes to that lock waited (#25).
///
/// The rule is [`palisade_core::marks::Marks::admit`], restated; the test
/// `rule::the_sql_functions_follow_cores_rule_table` runs core's table of
/// cases against this function and [`WRITE_FUNCTION`]. A refusal is
/// `o_admitted = false` with the marks as they are: nothing was written
/// (the lock of the row ends with the call), so no error and rollback is
/// needed.
///
/// `p_shared`: the sequencer's mode; `p_key` NULL: an admit, no read.
const FENCE_FUNCTION: &str = r#"CREATE OR REPLACE FUNCTION palisade_store_fence(
    p_lock TEXT, p_shared BOOLEAN, p_generation BIGINT, p_key BYTEA,
    OUT o_admitted BOOLEAN, OUT o_h_excl BIGINT, OUT o_h_shared BIGINT, OUT o_value BYTEA)
LANGUAGE plpgsql AS $fn$
DECLARE
    g NUMERIC := palisade_store_u64(p_generation);
    m_excl BIGINT; m_shared BIGINT;
BEGIN
    SELECT h_excl, h_shared INTO m_excl, m_shared
        FROM palisade_store_marks WHERE lock_name = p_lock FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO palisade_store_marks (lock_name, h_excl, h_shared, id_count)
            VALUES (p_lock, 0, 0, 0) ON CONFLICT (lock_name) DO NOTHING;
        SELECT h_excl, h_shared INTO STRICT m_excl, m_shared
            FROM palisade_store_marks WHERE lock_name = p_lock FOR UPDATE;
    END IF;
    o_h_excl := m_excl;
    o_h_shared := m_shared;
    IF p_shared THEN
        -- Shared: g >= H_excl, then H_shared = max(H_shared, g).
        o_admitted := g >= palisade_store_u64(m_excl);
        IF o_admitted AND g > palisade_store_u64(m_shared) THEN
            o_h_shared := p_generation;
        END IF;
    ELSE
        -- Exclusive: g >= max(H_excl, H_shared), then H_excl = g.
        o_admitted := g >= greatest(palisade_store_u64(m_excl), palisade_store_u64(m_shared));
        IF o_admitted THEN
            o_h_excl := p_generation;
        END IF;
    END IF;
    IF NOT o_admitted THEN
        RETURN;
    END IF;
    IF o_h_excl <> m_excl OR o_h_shared <> m_shared THEN
        UPDATE palisade_store_marks SET h_excl = o_h_excl, h_shared = o_h_shared
            WHERE lock_name = p_lock;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT value INTO o_value FROM palisade_store_data
            WHERE lock_name = p_lock AND key = p_key;
    END IF;
END
$fn$"#;

const CREATE_VERSION: &str =
    "CREATE TABLE IF NOT EXISTS palisade_store_schema (version BIGINT NOT NULL)";
const SELECT_VERSION: &str = "SELECT MAX(version) FROM palisade_store_schema";
const INSERT_VERSION: &str = "INSERT INTO palisade_store_schema (version) VALUES ($1)";

/// Locks a lock's mark row in a transaction of its own: only the mutation
/// check's fenced reads do this
/// ([`PostgresConfig::hold_transactions_unsafe_for_mutation_tests`](crate::PostgresConfig::hold_transactions_unsafe_for_mutation_tests)).
pub(crate) const LOCK_MARKS: &str = "SELECT h_excl, h_shared \
    FROM palisade_store_marks WHERE lock_name = $1 FOR UPDATE";
/// A lock's committed marks, without locking.
pub(crate) const SELECT_MARKS: &str =
    "SELECT h_excl, h_shared FROM palisade_store_marks WHERE lock_name = $1";
/// A plain read: value and marks from one snapshot.
pub(crate) const PLAIN_READ: &str = "SELECT m.h_excl, m.h_shared, d.value \
    FROM (SELECT 1) AS one \
    LEFT JOIN palisade_store_marks m ON m.lock_name = $1 \
    LEFT JOIN palisade_store_data d ON d.lock_name = $1 AND d.key = $2";
/// Creates or checks the tables, on `connection`. Refuses a database whose
/// schema is newer than this engine ([`OpenError::SchemaTooNew`]). Safe to
/// run from several replicas at once: they take turns on an advisory lock,
/// with the session's `lock_timeout` and `statement_timeout` lifted for
/// this one transaction (a replica may wait for another's migration).
pub(crate) async fn migrate(connection: &mut PgConnection) -> Result<(), OpenFailure> {
    let mut tx = connection.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '60s'")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SET LOCAL statement_timeout = '60s'")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query(CREATE_VERSION).execute(&mut *tx).await?;
    let found: Option<i64> = sqlx::query_scalar(SELECT_VERSION)
        .fetch_one(&mut *tx)
        .await?;
    // Checked before anything else is created: a newer schema may have
    // other tables, and this engine must not write beside them.
    if let Some(found) = found.filter(|found| *found > SCHEMA_VERSION) {
        return Err(OpenError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        }
        .into());
    }
    for statement in CREATE {
        sqlx::query(*statement).execute(&mut *tx).await?;
    }
    // Version 1 is the first: nothing older to migrate from yet.
    if found.is_none() {
        sqlx::query(INSERT_VERSION)
            .bind(SCHEMA_VERSION)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
