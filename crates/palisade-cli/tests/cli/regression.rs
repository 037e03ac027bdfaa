//! After the lock service lost its counter: new holders get generations
//! below the resource server's marks. The server (with a live check) says
//! it is a regression, the CLI prints the way out, `palisade raise-floor`
//! takes it, and no stale write is accepted at any point.

use palisade_core::{LockName, Sequencer};

use crate::fixtures::{
    Backend, Finished, PALISADE, code, printed_sequencer, run, serve_with, unique_name,
};

/// `palisade lock <lock> <flags> -- palisade put <lock> k <value>`.
async fn lock_and_put(flags: &[String], server: &str, lock: &LockName, value: &str) -> Finished {
    let mut args = vec!["lock".to_owned()];
    args.extend(flags.iter().cloned());
    args.extend([lock.as_str().to_owned(), "--".into(), PALISADE.into()]);
    args.extend(["put", "--server", server, lock.as_str(), "k", value].map(str::to_owned));
    run(args).await
}

/// `palisade put` with an explicit sequencer.
async fn put_with(sequencer: &Sequencer, server: &str, value: &str) -> Finished {
    let lock = sequencer.lock().as_str().to_owned();
    run([
        "put".to_owned(),
        "--server".into(),
        server.into(),
        "--sequencer".into(),
        sequencer.to_string(),
        lock,
        "k".into(),
        value.into(),
    ])
    .await
}

async fn stored_value(server: &str, lock: &LockName) -> String {
    let read = run(["get", "--server", server, lock.as_str(), "k"]).await;
    read.assert_code(code::OK).stdout_text()
}

/// The whole story on one backend; `wipe` makes the lock service lose its
/// counter, `live_check` are the server's flags for asking it.
async fn regression_is_named_and_recovered(
    backend: &mut Backend,
    extra_flags: &[&str],
    live_check: Vec<String>,
    wipe: impl FnOnce(&mut Backend),
) {
    let served = serve_with(&live_check).await;
    let server = served.url.as_str();
    let lock = unique_name(backend.name(), "regression");
    let mut flags = backend.flags();
    flags.extend(extra_flags.iter().map(|flag| (*flag).to_owned()));

    // Three holders write: the mark is the last one's generation.
    let mut last = None;
    for value in ["v1", "v2", "v3"] {
        let wrote = lock_and_put(&flags, server, &lock, value).await;
        wrote.assert_code(code::OK);
        last = Some(printed_sequencer(&wrote.stderr));
    }
    let old = last.expect("three writes");
    let mark = old.generation().get();

    wipe(backend);

    // A new holder gets a generation below the mark: refused, and named a
    // regression (the live check says it still holds), with the way out.
    let refused = lock_and_put(&flags, server, &lock, "after-wipe").await;
    refused.assert_code(code::STALE);
    let low = printed_sequencer(&refused.stderr);
    assert!(
        low.generation().get() < mark,
        "{} is not below {mark}",
        low.generation()
    );
    let line = refused
        .stderr
        .lines()
        .find(|line| line.contains("refused (409"))
        .unwrap_or_else(|| panic!("no refusal in {:?}", refused.stderr));
    assert_eq!(
        line,
        format!(
            "palisade: refused (409 stale, regression): lock `{lock}`: the lock service still \
             grants exclusive generation {low_gen}, yet the resource server has honoured up to \
             {mark} (marks: exclusive {mark}, shared 0): the lock service's generations went \
             backwards (lost counter, wiped or restored data); recover with `palisade \
             raise-floor {lock}` and the same lock service flags, then take the lock again; \
             nothing was changed",
            low_gen = low.generation()
        )
    );
    assert_eq!(stored_value(server, &lock).await, "v3");

    // The way out.
    let mut raise = vec!["raise-floor".to_owned(), lock.as_str().to_owned()];
    raise.extend(["--server".to_owned(), server.to_owned()]);
    raise.extend(flags.iter().cloned());
    let raised = run(raise).await;
    raised.assert_code(code::OK);
    assert!(
        raised
            .stderr
            .contains(&format!("lock `{lock}` marks: exclusive {mark}, shared 0")),
        "{}",
        raised.stderr
    );
    assert!(
        raised
            .stderr
            .contains(&format!("the next holder gets a generation above {mark}")),
        "{}",
        raised.stderr
    );

    // The next holder is accepted with a generation above the mark.
    let recovered = lock_and_put(&flags, server, &lock, "recovered").await;
    recovered.assert_code(code::OK);
    assert!(printed_sequencer(&recovered.stderr).generation().get() > mark);
    assert_eq!(stored_value(server, &lock).await, "recovered");

    // No stale write got through: neither the old holder (whose generation
    // equals the old mark) nor the low one from after the wipe.
    for stale in [&old, &low] {
        let refused = put_with(stale, server, "stale").await;
        assert!(
            [code::STALE, code::REFUSED].contains(&refused.code()),
            "a stale sequencer {stale} was not refused: {refused:?}"
        );
    }
    assert_eq!(stored_value(server, &lock).await, "recovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_that_lost_its_counter_is_named_and_raise_floor_recovers() {
    let redis = palisade_testkit::redis::RedisServer::spawn(
        palisade_testkit::redis::RedisOptions::persistence(
            palisade_testkit::redis::Persistence::None,
        ),
    );
    let live_check = vec![
        "--live-check".to_owned(),
        "redis".into(),
        "--redis-url".into(),
        redis.url(),
    ];
    let mut backend = Backend::Redis(redis);
    regression_is_named_and_recovered(
        &mut backend,
        &["--redis-generations", "counter"],
        live_check,
        |backend| {
            let Backend::Redis(redis) = backend else {
                unreachable!("a Redis backend")
            };
            // Everything Redis knew is gone, as after a restart without
            // persistence.
            assert_eq!(redis.command(&["FLUSHALL"]).unwrap().trim(), "OK");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_with_a_wiped_data_dir_is_named_and_raise_floor_recovers() {
    let etcd = palisade_testkit::etcd::EtcdServer::spawn();
    let live_check = vec![
        "--live-check".to_owned(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        etcd.endpoints().join(","),
    ];
    let mut backend = Backend::Etcd(Box::new(etcd));
    regression_is_named_and_recovered(&mut backend, &[], live_check, |backend| {
        let Backend::Etcd(etcd) = backend else {
            unreachable!("an etcd backend")
        };
        etcd.wipe().expect("etcd restarts with an empty data dir");
    })
    .await;
}

/// A database restored from an old backup: the lock row's generation went
/// back to an earlier value. The SQL backend's `raise-floor` lifts it.
async fn sql_restored_from_an_old_backup_is_named_and_raise_floor_recovers(backend: Backend) {
    let Backend::Sql(sql) = &backend else {
        unreachable!("a SQL backend")
    };
    let live_check = vec![
        "--live-check".to_owned(),
        backend.name().into(),
        "--database-url".into(),
        sql.url(),
    ];
    let mut backend = backend;
    regression_is_named_and_recovered(&mut backend, &[], live_check, |backend| {
        let Backend::Sql(sql) = backend else {
            unreachable!("a SQL backend")
        };
        // The lock table as a backup from before the three grants had it.
        sql.query("UPDATE palisade_locks SET generation = 1")
            .expect("roll the lock table back");
    })
    .await;

    // A lock that has no row yet: the raise creates it, and the first
    // grant is above the floor.
    let lock = unique_name(backend.name(), "fresh-floor");
    let mut raise = vec![
        "raise-floor".to_owned(),
        lock.as_str().to_owned(),
        "--above".into(),
        "5000".into(),
    ];
    raise.extend(backend.flags());
    let raised = run(raise.clone()).await;
    raised.assert_code(code::OK);
    assert!(
        raised.stderr.contains(&format!(
            "raised the generation floor of lock `{lock}` on {} from 0 to 5000",
            backend.name()
        )),
        "{}",
        raised.stderr
    );
    // Never lowered: a second, lower raise changes nothing.
    raise[3] = "10".into();
    let again = run(raise).await;
    again.assert_code(code::OK);
    assert!(again.stderr.contains("is already 5000"), "{}", again.stderr);
    let mut taken = vec!["lock".to_owned()];
    taken.extend(backend.flags());
    taken.extend([lock.as_str().to_owned(), "--".into(), "true".into()]);
    let taken = run(taken).await;
    taken.assert_code(code::OK);
    assert!(printed_sequencer(&taken.stderr).generation().get() > 5000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restored_from_an_old_backup_is_named_and_raise_floor_recovers() {
    sql_restored_from_an_old_backup_is_named_and_raise_floor_recovers(Backend::postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restored_from_an_old_backup_is_named_and_raise_floor_recovers() {
    sql_restored_from_an_old_backup_is_named_and_raise_floor_recovers(Backend::mariadb()).await;
}

/// etcd raises its floor one put per revision: an absurd gap is refused
/// with the limit and the flag that sets it, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_etcd_gap_is_refused_with_the_limit() {
    let backend = Backend::etcd();
    let lock = unique_name(backend.name(), "absurd-gap");
    let mut args = vec!["raise-floor".to_owned(), lock.as_str().to_owned()];
    args.extend(["--above".to_owned(), "1000000000".into()]);
    args.extend(["--max-gap".to_owned(), "1000".into()]);
    args.extend(backend.flags());
    let refused = run(args).await;
    let line = refused.one_line_error(code::ERROR);
    assert!(line.contains("is over the limit of 1000"), "{line}");
    assert!(line.contains("`--max-gap` sets the limit"), "{line}");
}
