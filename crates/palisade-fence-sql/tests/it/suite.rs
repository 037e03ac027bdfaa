//! The tests, generic over the database; `postgres.rs` and `mariadb.rs`
//! run each of them on a real server.

use std::sync::Arc;

use palisade_core::marks::{Marks, RULE_CASES};
use palisade_core::{Mode, Signer, SigningKey, Verifier};
use palisade_fence_sql::{Fence, FenceError, Refused, RowUpdate};

use crate::common::{Env, TestDb, excl, seq};

/// Commits a fence of `sequencer` with nothing else in the transaction.
async fn admit<D: TestDb>(
    env: &Env<D>,
    sequencer: &palisade_core::Sequencer,
) -> Result<Marks, FenceError> {
    let tx = env.pool.begin().await?;
    let fenced = Fence::new().read(tx, sequencer).await?;
    Ok(fenced.commit().await?)
}

pub(crate) async fn the_shared_rule_table_of_core_holds<D: TestDb>() {
    let env = Env::<D>::start(4).await;
    for (index, case) in RULE_CASES.iter().enumerate() {
        let lock = format!("rule-case/{index}");
        let before = case.before_marks();
        if before.exclusive > 0 {
            admit(&env, &excl(&lock, before.exclusive)).await.unwrap();
        }
        if before.shared > 0 {
            admit(&env, &seq(&lock, Mode::Shared, before.shared))
                .await
                .unwrap();
        }
        assert_eq!(env.marks(&lock).await, before, "{case:?}");
        let outcome = admit(&env, &seq(&lock, case.mode, case.generation)).await;
        match case.expected_marks() {
            Some(after) => assert_eq!(outcome.unwrap(), after, "{case:?}"),
            None => assert!(
                matches!(outcome, Err(FenceError::Refused(Refused::Stale { marks, .. })) if marks == before),
                "{case:?}: {outcome:?}"
            ),
        }
        let committed = case.expected_marks().unwrap_or(before);
        assert_eq!(env.marks(&lock).await, committed, "{case:?}");
    }
}

pub(crate) async fn a_paused_holders_transaction_is_refused_and_rolls_back<D: TestDb>() {
    let env = Env::<D>::start(4).await;
    env.exec("CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(40))")
        .await;
    // The new holder (generation 2) wrote and committed.
    let mut tx = palisade_fence_sql::begin_fenced(&env.pool, &excl("orders", 2))
        .await
        .unwrap();
    D::exec(
        &mut tx,
        "INSERT INTO orders VALUES (1, 'new holder')".into(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // The old holder (generation 1) wakes from its pause and writes.
    let mut tx = env.pool.begin().await.unwrap();
    D::exec(&mut tx, "INSERT INTO orders VALUES (2, 'stale')".into())
        .await
        .unwrap();
    D::exec(
        &mut tx,
        "UPDATE orders SET note = 'stale' WHERE id = 1".into(),
    )
    .await
    .unwrap();
    let refused = palisade_fence_sql::fence(tx, &excl("orders", 1))
        .await
        .unwrap_err();
    match refused {
        FenceError::Refused(Refused::Stale {
            presented, marks, ..
        }) => {
            assert_eq!(presented.get(), 1);
            assert_eq!(
                marks,
                Marks {
                    exclusive: 2,
                    shared: 0
                }
            );
        }
        other => panic!("expected a stale refusal, got {other:?}"),
    }
    // Every statement of the stale transaction is gone.
    assert_eq!(env.ints("SELECT id FROM orders").await, [1]);
    assert_eq!(
        env.ints("SELECT count(*) FROM orders WHERE note = 'stale'")
            .await,
        [0]
    );
    assert_eq!(
        env.marks("orders").await,
        Marks {
            exclusive: 2,
            shared: 0
        }
    );
}

/// The mark row stays locked until commit: an older holder fencing while a
/// newer one's transaction is open waits, then reads the committed mark
/// (not its snapshot) and is refused.
pub(crate) async fn a_stale_holder_waits_for_the_row_lock_then_is_refused<D: TestDb>() {
    let env = Arc::new(Env::<D>::start(4).await);
    admit(&env, &excl("ledger", 1)).await.unwrap();
    let newer = palisade_fence_sql::begin_fenced(&env.pool, &excl("ledger", 5))
        .await
        .unwrap();
    let mut older = tokio::spawn({
        let env = Arc::clone(&env);
        async move {
            palisade_fence_sql::begin_fenced(&env.pool, &excl("ledger", 3))
                .await
                .map(drop)
        }
    });
    tokio::select! {
        () = env.until_a_transaction_waits_for_a_lock() => {}
        outcome = &mut older => panic!("the older holder did not wait: {outcome:?}"),
    }
    newer.commit().await.unwrap();
    let outcome = older.await.unwrap();
    assert!(
        matches!(outcome, Err(FenceError::Refused(Refused::Stale { marks, .. })) if marks.exclusive == 5),
        "{outcome:?}"
    );
}

/// Many holders with random generations race on one lock; each fences,
/// then appends its generation to a log. In commit order (the log's
/// auto-numbered id, assigned under the mark row lock) generations never
/// decrease, and the final mark is the highest accepted generation.
pub(crate) async fn concurrent_holders_never_commit_out_of_order<D: TestDb>() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 8;
    let env = Arc::new(Env::<D>::start(TASKS as u32 + 2).await);
    env.exec(format!(
        "CREATE TABLE fence_log (id {}, generation BIGINT NOT NULL)",
        D::SERIAL
    ))
    .await;
    // Create the marks row first, so the race is on the fence, not on the
    // row's creation.
    admit(&env, &excl("race", 1)).await.unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let env = Arc::clone(&env);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let mut accepted = Vec::new();
                for _ in 0..ROUNDS {
                    let generation = rand::random_range(2..=400u64);
                    match palisade_fence_sql::begin_fenced(&env.pool, &excl("race", generation))
                        .await
                    {
                        Ok(mut tx) => {
                            D::exec(
                                &mut tx,
                                format!("INSERT INTO fence_log (generation) VALUES ({generation})"),
                            )
                            .await
                            .unwrap();
                            tx.commit().await.unwrap();
                            accepted.push(generation);
                        }
                        Err(FenceError::Refused(Refused::Stale { .. })) => {}
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
                accepted
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.extend(task.await.unwrap());
    }
    let log = env
        .ints("SELECT generation FROM fence_log ORDER BY id")
        .await;
    assert_eq!(log.len(), accepted.len());
    assert!(
        log.windows(2).all(|pair| pair[0] <= pair[1]),
        "a lower generation committed after a higher one: {log:?}"
    );
    let highest = *log.last().expect("at least one holder was accepted");
    assert_eq!(env.marks("race").await.exclusive, highest as u64);
}

pub(crate) async fn shared_sequencers_cannot_fence_writes_and_signatures_are_checked<D: TestDb>() {
    let env = Env::<D>::start(2).await;
    let tx = env.pool.begin().await.unwrap();
    let refused = palisade_fence_sql::fence(tx, &seq("docs", Mode::Shared, 4))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, FenceError::Refused(Refused::SharedOnWrite { .. })),
        "{refused:?}"
    );

    let key = SigningKey::new("k1", *b"0123456789abcdef0123456789abcdef").unwrap();
    let signer = Signer::new("prod", key.clone()).unwrap();
    let fence = Fence::new().with_verifier(Verifier::new().with_key(key).unwrap());
    let signed = signer.sign(excl("docs", 4));
    let forged: palisade_core::Sequencer = signed
        .to_string()
        .replace("gen=4", "gen=9")
        .parse()
        .unwrap();
    for bad in [excl("docs", 9), forged] {
        let tx = env.pool.begin().await.unwrap();
        let refused = fence.write(tx, &bad).await.unwrap_err();
        assert!(
            matches!(refused, FenceError::Signature { .. }),
            "{refused:?}"
        );
    }
    // Refused before anything was written: the marks are untouched.
    assert_eq!(env.marks("docs").await, Marks::ZERO);
    let tx = env.pool.begin().await.unwrap();
    let fenced = fence.write(tx, &signed).await.unwrap();
    assert_eq!(fenced.commit().await.unwrap().exclusive, 4);

    let tx = env.pool.begin().await.unwrap();
    let refused = palisade_fence_sql::fence(tx, &excl("docs", u64::MAX))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, FenceError::GenerationOutOfRange { .. }),
        "{refused:?}"
    );
}

/// Per-row fencing restates the exclusive rule in SQL (`fence_generation
/// <= g`, the row's generation a one-mark `H_excl`): every exclusive case
/// of core's table whose shared mark is 0 runs through `update_row`, which
/// must admit exactly what `Marks::admit` admits and leave the row's
/// generation where the table says, the row written exactly when admitted.
/// (Checked by hand: with `<` for `<=` in `ValidRowUpdate::update_sql`
/// this fails on both databases, on the equal-generation cases.)
pub(crate) async fn per_row_fencing_follows_cores_exclusive_rule_table<D: TestDb>() {
    let env = Env::<D>::start(2).await;
    env.exec(
        "CREATE TABLE fenced_rows (id VARCHAR(40) PRIMARY KEY, v VARCHAR(20), \
         fence_generation BIGINT NOT NULL)",
    )
    .await;
    let cases = RULE_CASES
        .iter()
        .enumerate()
        .filter(|(_, case)| case.mode == Mode::Exclusive && case.before.1 == 0);
    let mut ran = 0;
    for (index, case) in cases {
        let id = format!("case-{index}");
        env.exec(format!(
            "INSERT INTO fenced_rows VALUES ('{id}', '', {})",
            case.before.0
        ))
        .await;
        // A lock of its own, so the lock-wide fence always passes.
        let mut tx = palisade_fence_sql::begin_fenced(
            &env.pool,
            &excl(&format!("row-case/{index}"), case.generation),
        )
        .await
        .unwrap();
        let outcome = tx
            .update_row(RowUpdate {
                table: "fenced_rows",
                key_column: "id",
                key: &id,
                set: &[("v", "written")],
            })
            .await;
        tx.commit().await.unwrap();
        let stored = env
            .ints(format!(
                "SELECT fence_generation FROM fenced_rows WHERE id = '{id}'"
            ))
            .await;
        let written = env
            .ints(format!(
                "SELECT count(*) FROM fenced_rows WHERE id = '{id}' AND v = 'written'"
            ))
            .await;
        assert_eq!(written, [i64::from(case.expected.is_some())], "{case:?}");
        match case.expected {
            Some((after, _)) => {
                assert!(outcome.is_ok(), "{case:?}: {outcome:?}");
                assert_eq!(stored, [after as i64], "{case:?}");
            }
            None => {
                assert!(
                    matches!(outcome, Err(FenceError::StaleRow { stored, .. }) if stored as u64 == case.before.0),
                    "{case:?}: {outcome:?}"
                );
                assert_eq!(stored, [case.before.0 as i64], "{case:?}");
            }
        }
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} cases ran");
}

/// Per-row fencing: the update matches only a row whose generation is not
/// newer; a miss is told apart as "no such row" or "stale row".
pub(crate) async fn per_row_fencing_tells_stale_from_missing<D: TestDb>() {
    let env = Env::<D>::start(2).await;
    env.exec(
        "CREATE TABLE accounts (id VARCHAR(20) PRIMARY KEY, balance VARCHAR(20), \
         fence_generation BIGINT NOT NULL)",
    )
    .await;
    env.exec("INSERT INTO accounts VALUES ('a', '10', 0)").await;
    let update = |balance| RowUpdate {
        table: "accounts",
        key_column: "id",
        key: "a",
        set: balance,
    };
    let mut tx = palisade_fence_sql::begin_fenced(&env.pool, &excl("acct", 7))
        .await
        .unwrap();
    tx.update_row(update(&[("balance", "20")])).await.unwrap();
    // The same generation again, same values: still the holder's row.
    tx.update_row(update(&[("balance", "20")])).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(env.ints("SELECT fence_generation FROM accounts").await, [7]);

    // An older generation through another lock's fence: the row refuses.
    let mut tx = palisade_fence_sql::begin_fenced(&env.pool, &excl("other", 3))
        .await
        .unwrap();
    let refused = tx
        .update_row(update(&[("balance", "0")]))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, FenceError::StaleRow { stored: 7, .. }),
        "{refused:?}"
    );
    let missing = tx
        .update_row(RowUpdate {
            key: "nobody",
            ..update(&[("balance", "0")])
        })
        .await
        .unwrap_err();
    assert!(
        matches!(missing, FenceError::NoSuchRow { .. }),
        "{missing:?}"
    );
    let bad = tx
        .update_row(RowUpdate {
            table: "accounts; DROP TABLE accounts",
            ..update(&[("balance", "0")])
        })
        .await
        .unwrap_err();
    assert!(matches!(bad, FenceError::BadIdentifier { .. }), "{bad:?}");
    tx.rollback().await.unwrap();
    assert_eq!(
        env.ints("SELECT count(*) FROM accounts WHERE balance = '20'")
            .await,
        [1]
    );
}

/// The first fences of many new locks at once all pass: creating a marks
/// row must not deadlock with the creation of another lock's row.
pub(crate) async fn first_fences_of_many_new_locks_all_pass<D: TestDb>() {
    const TASKS: usize = 16;
    let env = Arc::new(Env::<D>::start(TASKS as u32 + 2).await);
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let env = Arc::clone(&env);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let tx =
                    palisade_fence_sql::begin_fenced(&env.pool, &excl(&format!("new/{task}"), 1))
                        .await?;
                tx.commit().await.map_err(FenceError::from)
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().expect("a first fence failed");
    }
}
