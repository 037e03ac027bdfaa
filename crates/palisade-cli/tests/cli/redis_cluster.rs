//! The `palisade` command on a Redis Cluster with a replica per master,
//! named with `--redis-url redis+cluster://HOST:PORT,...`: one cluster for
//! every case (six processes start once). `palisade lock` + `put`, a stale
//! sequencer refused, `locks show` and `unlock --force` fencing a paused
//! holder, `raise-floor --above`, and `serve --live-check redis` asking the
//! cluster about a holder whose key is gone.

use std::sync::Arc;
use std::time::Duration;

use palisade_core::{Lock, LockGuard, LockName, Mode, SessionOptions};
use palisade_lock_redis::{RedisConfig, RedisLockClient};
use palisade_testkit::redis::RedisCluster;

use crate::fixtures::{Backend, code, printed_sequencer, run, serve, serve_with, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_on_a_redis_cluster_with_replicas() {
    let cluster = Arc::new(RedisCluster::start_with_replicas());
    let backend = || Backend::RedisCluster(cluster.clone());
    crate::lock_write::lock_then_put(backend()).await;
    crate::lock_write::stale_sequencer_is_refused(backend()).await;
    crate::force_unlock::forced_unlock_fences_the_paused_holder(backend()).await;
    raise_floor_lifts_the_next_grant(&backend()).await;
    live_check_asks_the_cluster(&backend(), &cluster).await;
}

/// `palisade raise-floor --above G` on the cluster: the next holder's
/// generation is above `G`, far beyond anything the clock scheme would
/// have reached by itself.
async fn raise_floor_lifts_the_next_grant(backend: &Backend) {
    let name = unique_name(backend.name(), "raise-floor");
    let served = serve().await;
    let first = lock_and_put(backend, &served.url, &name).await;
    let above = first + 1_000_000_000_000;
    let mut raise = vec!["raise-floor".to_owned()];
    raise.extend(backend.flags());
    raise.extend(["--above".into(), above.to_string(), name.as_str().into()]);
    run(raise).await.assert_code(code::OK);
    let next = lock_and_put(backend, &served.url, &name).await;
    assert!(next > above, "{next} > {above}");
}

/// `palisade lock NAME -- palisade put ...`; the generation it printed.
async fn lock_and_put(backend: &Backend, server: &str, name: &LockName) -> u64 {
    let mut args = vec!["lock".to_owned()];
    args.extend(backend.flags());
    args.extend([
        name.as_str().to_owned(),
        "--".into(),
        crate::fixtures::PALISADE.into(),
    ]);
    args.extend(["put", "--server", server, name.as_str(), "k", "v"].map(str::to_owned));
    let locked = run(args).await;
    locked.assert_code(code::OK);
    printed_sequencer(&locked.stderr).generation().get()
}

/// `serve --live-check redis --redis-url redis+cluster://...`: a holder
/// whose lock key was deleted on its master is refused before anyone
/// newer wrote.
async fn live_check_asks_the_cluster(backend: &Backend, cluster: &RedisCluster) {
    let mut flags = vec!["--live-check".to_owned(), "redis".into()];
    flags.extend(backend.flags().into_iter().skip(2));
    let served = serve_with(&flags).await;
    let locks = RedisLockClient::connect(RedisConfig::cluster(cluster.urls().iter().cloned()))
        .await
        .expect("connect to the cluster");
    let session = locks
        .session(SessionOptions::default().with_ttl(Duration::from_secs(30)))
        .unwrap();
    let name = unique_name(backend.name(), "live-check");
    let guard = session.acquire(&name, Mode::Exclusive).await.unwrap();
    let sequencer = guard.sequencer().unwrap();
    let put = |value: &'static str| {
        let (server, sequencer) = (served.url.clone(), sequencer.to_string());
        let name = name.as_str().to_owned();
        async move {
            run([
                "put",
                "--server",
                &server,
                "--sequencer",
                &sequencer,
                &name,
                "k",
                value,
            ])
            .await
        }
    };
    put("while-held").await.assert_code(code::OK);
    backend.end_lease(&sequencer);
    let refused = put("after-the-key-is-gone").await;
    refused.assert_code(code::REFUSED);
    assert!(
        refused.stderr.contains("409 not_held"),
        "{}",
        refused.stderr
    );
}
