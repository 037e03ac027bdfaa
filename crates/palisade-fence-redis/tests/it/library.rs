//! The library is loaded idempotently and versioned: absent, it is loaded;
//! this crate's, it is kept; an older, newer, modified or foreign library
//! of the same name is detected and left alone.

use palisade_fence_redis::{
    FenceOptions, Found, LIBRARY_NAME, LIBRARY_SOURCE, LIBRARY_VERSION, RedisFence, RedisFenceError,
};
use palisade_testkit::redis::{RedisOptions, RedisServer};

use crate::common::{exclusive, unique_lock};

fn code_on(redis: &RedisServer) -> String {
    let list = redis
        .command(&["FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_NAME, "WITHCODE"])
        .unwrap();
    // One line per item: name, engine, functions..., "library_code", code.
    list.split_once("library_code\n")
        .map(|(_, code)| code.to_owned())
        .unwrap_or_default()
}

fn with_version(version: u32) -> String {
    LIBRARY_SOURCE.replacen(
        &format!("version {LIBRARY_VERSION}"),
        &format!("version {version}"),
        1,
    )
}

async fn connect(redis: &RedisServer, upgrade: bool) -> Result<RedisFence, RedisFenceError> {
    let connection = redis::Client::open(redis.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    RedisFence::with_options(
        connection,
        FenceOptions::default().with_library_upgrade(upgrade),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_once_and_kept() {
    let redis = RedisServer::spawn(RedisOptions::default());
    assert_eq!(code_on(&redis), "");
    // Many clients at once: every one ends up with the library, none fails.
    let url = redis.url();
    let connects = (0..8).map(|_| {
        let url = url.clone();
        async move {
            let connection = redis::Client::open(url)
                .unwrap()
                .get_connection_manager()
                .await
                .unwrap();
            RedisFence::new(connection).await
        }
    });
    for fence in futures_join(connects).await {
        fence.unwrap();
    }
    assert_eq!(code_on(&redis).trim_end(), LIBRARY_SOURCE.trim_end());
    let fence = connect(&redis, false).await.unwrap();
    fence
        .admit(&exclusive(&unique_lock("lib"), 1))
        .await
        .unwrap()
        .unwrap();
}

async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.unwrap());
    }
    outputs
}

#[tokio::test]
async fn an_older_library_is_detected_and_replaced_only_when_asked() {
    let redis = RedisServer::spawn(RedisOptions::default());
    let older = with_version(0);
    redis.command(&["FUNCTION", "LOAD", &older]).unwrap();
    match connect(&redis, false).await {
        Err(RedisFenceError::Library {
            found: Found::Older(0),
            ours,
            ..
        }) => assert_eq!(ours, LIBRARY_VERSION),
        other => panic!("an older library: {other:?}"),
    }
    assert_eq!(
        code_on(&redis).trim_end(),
        older.trim_end(),
        "left as it was"
    );
    connect(&redis, true).await.unwrap();
    assert_eq!(
        code_on(&redis).trim_end(),
        LIBRARY_SOURCE.trim_end(),
        "upgraded on request"
    );
}

#[tokio::test]
async fn newer_modified_and_foreign_libraries_are_never_replaced() {
    let foreign = format!(
        "#!lua name={LIBRARY_NAME}\nredis.register_function('someone_elses', function() return 1 end)"
    );
    let modified =
        LIBRARY_SOURCE.replace("local admitted = ge(g, required)", "local admitted = true");
    for (code, expected) in [
        (
            with_version(LIBRARY_VERSION + 1),
            Found::Newer(LIBRARY_VERSION + 1),
        ),
        (modified, Found::Modified),
        (foreign, Found::Foreign),
    ] {
        let redis = RedisServer::spawn(RedisOptions::default());
        redis.command(&["FUNCTION", "LOAD", &code]).unwrap();
        match connect(&redis, true).await {
            Err(RedisFenceError::Library { found, .. }) => assert_eq!(found, expected),
            other => panic!("{expected:?}: {other:?}"),
        }
        assert_eq!(
            code_on(&redis).trim_end(),
            code.trim_end(),
            "{expected:?} left as it was"
        );
    }
}

#[tokio::test]
async fn a_function_name_taken_by_another_library_is_an_error() {
    let redis = RedisServer::spawn(RedisOptions::default());
    redis
        .command(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=squatter\nredis.register_function('palisade_fence_apply', function() return 1 end)",
        ])
        .unwrap();
    let error = connect(&redis, false).await.unwrap_err().to_string();
    assert!(
        error.contains("palisade_fence_apply already exists"),
        "{error}"
    );
}
