//! The SQL fence on a real PostgreSQL (READ COMMITTED, its default).

use sqlx::Postgres;

use crate::suite;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_rule_table_of_core_holds() {
    suite::the_shared_rule_table_of_core_holds::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_transaction_is_refused_and_rolls_back() {
    suite::a_paused_holders_transaction_is_refused_and_rolls_back::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_waits_for_the_row_lock_then_is_refused() {
    suite::a_stale_holder_waits_for_the_row_lock_then_is_refused::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_never_commit_out_of_order() {
    suite::concurrent_holders_never_commit_out_of_order::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_sequencers_cannot_fence_writes_and_signatures_are_checked() {
    suite::shared_sequencers_cannot_fence_writes_and_signatures_are_checked::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_fencing_follows_cores_exclusive_rule_table() {
    suite::per_row_fencing_follows_cores_exclusive_rule_table::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_row_fencing_tells_stale_from_missing() {
    suite::per_row_fencing_tells_stale_from_missing::<Postgres>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_fences_of_many_new_locks_all_pass() {
    suite::first_fences_of_many_new_locks_all_pass::<Postgres>().await;
}
