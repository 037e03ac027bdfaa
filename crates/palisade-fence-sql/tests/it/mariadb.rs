//! The SQL fence on a real MariaDB (InnoDB, REPEATABLE READ, its default).

use sqlx::MySql;

use crate::{common, suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_rule_table_of_core_holds() {
    suite::the_shared_rule_table_of_core_holds::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_transaction_is_refused_and_rolls_back() {
    suite::a_paused_holders_transaction_is_refused_and_rolls_back::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_waits_for_the_row_lock_then_is_refused() {
    suite::a_stale_holder_waits_for_the_row_lock_then_is_refused::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_never_commit_out_of_order() {
    suite::concurrent_holders_never_commit_out_of_order::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_sequencers_cannot_fence_writes_and_signatures_are_checked() {
    suite::shared_sequencers_cannot_fence_writes_and_signatures_are_checked::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_fencing_follows_cores_exclusive_rule_table() {
    suite::per_row_fencing_follows_cores_exclusive_rule_table::<MySql>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_fencing_tells_stale_from_missing() {
    suite::per_row_fencing_tells_stale_from_missing::<MySql>().await;
}

/// REPEATABLE READ: the snapshot is taken by the first plain read. A
/// read-modify-write whose read came before the fence reads the counter as
/// it was before the previous holder committed, and loses its update; with
/// the fence first, the read comes after the previous holder's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_before_the_fence_loses_an_update_and_fence_first_does_not() {
    let env = common::Env::<MySql>::start(4).await;
    env.exec("CREATE TABLE counter (id INT PRIMARY KEY, v BIGINT NOT NULL)")
        .await;
    for (read_first, expected) in [(true, 1), (false, 2)] {
        env.exec("DELETE FROM counter").await;
        env.exec("INSERT INTO counter VALUES (1, 0)").await;
        let lock = format!("counter-{read_first}");
        // The previous holder has fenced and read; it has not written yet.
        let mut previous = palisade_fence_sql::begin_fenced(&env.pool, &common::excl(&lock, 1))
            .await
            .unwrap();
        let v = read_counter(&mut previous).await;
        // The next holder's transaction starts now.
        let mut next = env.pool.begin().await.unwrap();
        if read_first {
            // The pitfall: a plain read before the fence fixes the snapshot.
            read_counter(&mut next).await;
        }
        let next_fence = tokio::spawn(async move {
            let mut next = palisade_fence_sql::fence(next, &common::excl(&lock, 2))
                .await
                .unwrap();
            let v = read_counter(&mut next).await;
            write_counter(&mut next, v + 1).await;
            next.commit().await.unwrap();
        });
        env.until_a_transaction_waits_for_a_lock().await;
        write_counter(&mut previous, v + 1).await;
        previous.commit().await.unwrap();
        next_fence.await.unwrap();
        assert_eq!(
            env.ints("SELECT v FROM counter").await,
            [expected],
            "read before the fence: {read_first}"
        );
    }
}

async fn read_counter(conn: &mut sqlx::MySqlConnection) -> i64 {
    sqlx::query_scalar("SELECT v FROM counter WHERE id = 1")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn write_counter(conn: &mut sqlx::MySqlConnection, v: i64) {
    sqlx::query("UPDATE counter SET v = ? WHERE id = 1")
        .bind(v)
        .execute(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_fences_of_many_new_locks_all_pass() {
    suite::first_fences_of_many_new_locks_all_pass::<MySql>().await;
}
