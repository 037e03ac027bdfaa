//! TLS and authentication against a real `redis-server`: `rediss://` with a
//! private CA (made here, at test time), mutual TLS, a client that does not
//! trust the server, `#insecure`, and passwords and ACL users in the URL.
//!
//! A TLS server is started with `--port 0 --tls-port <free>`: it has no
//! plaintext TCP port, so every lock operation that succeeds went over TLS.

use std::time::Duration;

use palisade_core::{Lock, LockError, LockGuard, LockName, Mode};
use palisade_lock_redis::{RedisConfig, RedisLockClient, RedisLockError};
use palisade_testkit::redis::{RedisOptions, RedisServer};

use crate::common;
use common::{options, unique_prefix};

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid lock name")
}

/// Connects, or returns the error. A refusal must come back as an error,
/// not a hang: the bound is far above the connect timeout (2 s, doubled
/// for the whole connect), so only a hang can reach it.
async fn try_connect(config: RedisConfig) -> Result<RedisLockClient, RedisLockError> {
    tokio::time::timeout(Duration::from_secs(30), RedisLockClient::connect(config))
        .await
        .expect("connecting must end with a client or an error, not hang")
}

/// One exclusive acquire and release on `client`, checking the sequencer.
async fn acquire_and_release(client: &RedisLockClient, lock: &str) {
    let session = client
        .session(options(Duration::from_secs(5)))
        .expect("session");
    let guard = session
        .acquire(&name(lock), Mode::Exclusive)
        .await
        .expect("acquire");
    let sequencer = guard.sequencer().expect("a fresh hold has a sequencer");
    assert_eq!(sequencer.lock().as_str(), lock);
    guard.release().await.expect("release");
    assert!(
        session
            .try_acquire(&name(lock), Mode::Exclusive)
            .await
            .expect("try_acquire after release")
            .is_some(),
        "the lock is free again after the release"
    );
}

// ---------------------------------------------------------------------------
// Passwords and ACL users (plain TCP).

/// `--requirepass`: the URL with the password works; without it, or with a
/// wrong one, connecting fails with `PermissionDenied` (not a hang, not a
/// generic error), and the message does not leak the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_in_the_url_is_required_and_used() {
    common::trace();
    let password = "correct horse/battery:staple";
    let server = RedisServer::spawn(RedisOptions::default().with_password(password));
    let prefix = unique_prefix("password");

    let client =
        RedisLockClient::connect(RedisConfig::new(server.url()).with_key_prefix(prefix.clone()))
            .await
            .expect("the URL with the password connects");
    acquire_and_release(&client, "with-password").await;

    let without =
        try_connect(RedisConfig::new(server.url_without_password()).with_key_prefix(&*prefix))
            .await;
    let error = without.expect_err("no password: refused");
    assert!(
        matches!(
            error,
            RedisLockError::Lock(LockError::PermissionDenied { .. })
        ),
        "no password: {error:?}"
    );

    let wrong_url = server.url_as("default", "not-the-password");
    let wrong = try_connect(RedisConfig::new(wrong_url).with_key_prefix(&*prefix)).await;
    let error = wrong.expect_err("wrong password: refused");
    assert!(
        matches!(
            error,
            RedisLockError::Lock(LockError::PermissionDenied { .. })
        ),
        "wrong password: {error:?}"
    );
    assert!(
        !error.to_string().contains("not-the-password"),
        "the password stays out of the message: {error}"
    );
}

/// An ACL user with the rights the backend needs works through
/// `redis://user:password@`; a user without the right to run scripts is
/// refused with `PermissionDenied` at connect (the scripts are loaded then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_in_the_url() {
    common::trace();
    let server = RedisServer::spawn(RedisOptions::default().with_password("admin-pw"));
    let prefix = unique_prefix("acl");
    let key_pattern = format!("~{prefix}*");
    let channel_pattern = format!("&{prefix}*");
    let setuser = |user: &str, rules: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">user-pw"];
        args.extend_from_slice(rules);
        server.command(&args).expect("ACL SETUSER")
    };
    assert_eq!(
        setuser(
            "locker",
            &[&key_pattern, &channel_pattern, "+@all", "-@dangerous"]
        ),
        "OK"
    );
    assert_eq!(
        setuser(
            "reader",
            &[
                &key_pattern,
                &channel_pattern,
                "+@read",
                "+@connection",
                "+@pubsub"
            ]
        ),
        "OK"
    );

    let locker = RedisLockClient::connect(
        RedisConfig::new(server.url_as("locker", "user-pw")).with_key_prefix(prefix.clone()),
    )
    .await
    .expect("the ACL user with the rights it needs connects");
    acquire_and_release(&locker, "acl").await;

    let reader = try_connect(
        RedisConfig::new(server.url_as("reader", "user-pw")).with_key_prefix(prefix.clone()),
    )
    .await;
    let error = reader.expect_err("a user who may not run scripts");
    assert!(
        matches!(
            error,
            RedisLockError::Lock(LockError::PermissionDenied { .. })
        ),
        "NOPERM: {error:?}"
    );
}

// ---------------------------------------------------------------------------
// TLS.

#[cfg(feature = "tls")]
mod over_tls {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use palisade_testkit::redis::{RedisTls, TlsClientAuth};
    use palisade_testkit::tls::Authority;
    use rcgen::ExtendedKeyUsagePurpose;
    use tokio::time::Instant;

    use super::*;

    /// A TLS-only server whose certificate `authority` signed.
    fn tls_server(
        authority: &Authority,
        client_auth: TlsClientAuth,
        password: Option<&str>,
    ) -> RedisServer {
        let server_cert = authority.server();
        let tls = RedisTls::new(
            server_cert.cert_pem,
            server_cert.key_pem,
            authority.cert_pem.clone(),
        )
        .with_client_auth(client_auth);
        let mut options = RedisOptions::default().with_tls(tls);
        if let Some(password) = password {
            options = options.with_password(password);
        }
        let server = RedisServer::spawn(options);
        assert!(server.is_tls());
        let url = server.url();
        assert!(url.starts_with("rediss://"), "{url}");
        assert!(url.contains("127.0.0.1:"), "{url}");
        // No plaintext TCP port: whatever works below worked over TLS.
        assert_eq!(
            server
                .command(&["CONFIG", "GET", "port"])
                .expect("CONFIG GET"),
            "port\n0"
        );
        server
    }

    /// Asserts that connecting failed because the client refused the
    /// server's certificate: a typed `Unavailable` error whose message
    /// names the TLS handshake and what rustls objected to (not a
    /// `BackendTimeout`: the refusal does not wait out the connect timeout).
    fn assert_handshake_refused(
        result: Result<RedisLockClient, RedisLockError>,
        expected_in_message: &str,
    ) {
        let error = result.expect_err("the handshake must fail");
        let message = error.to_string();
        assert!(
            matches!(error, RedisLockError::Lock(LockError::Unavailable { .. })),
            "{error:?}"
        );
        assert!(
            message.contains("TLS handshake with `rediss://127.0.0.1:"),
            "{message}"
        );
        assert!(
            message.contains(expected_in_message),
            "`{message}` should mention `{expected_in_message}`"
        );
    }

    /// Over `rediss://` with a private CA and a password: acquire, release,
    /// and a hand-off between two clients (two command connections, two
    /// inbox subscriptions, all TLS). The waiter's re-check interval is far
    /// longer than the test allows, so it can only have been woken by the
    /// grant message on its TLS pub/sub connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn acquire_release_and_hand_off_over_tls() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let server = tls_server(&authority, TlsClientAuth::No, Some("tls-and-password"));
        let prefix = unique_prefix("tls-handoff");
        let config = || {
            RedisConfig::new(server.url())
                .with_tls_root_cert_pem(authority.cert_pem.clone())
                .with_key_prefix(prefix.clone())
                .with_waiter_recheck(Duration::from_secs(60))
        };
        let holder_client = RedisLockClient::connect(config())
            .await
            .expect("connect over TLS");
        let waiter_client = RedisLockClient::connect(config())
            .await
            .expect("connect over TLS");
        acquire_and_release(&holder_client, "tls/simple").await;

        let lock_name = name("tls/hand-off");
        let holder = holder_client
            .session(options(Duration::from_secs(30)))
            .unwrap();
        let waiter = waiter_client
            .session(options(Duration::from_secs(30)))
            .unwrap();
        let held = holder
            .acquire(&lock_name, Mode::Exclusive)
            .await
            .expect("holder acquires");
        let held_generation = held.generation();

        let released = Arc::new(AtomicBool::new(false));
        let waiting = tokio::spawn({
            let (lock_name, released) = (lock_name.clone(), released.clone());
            async move {
                let guard = waiter
                    .acquire(&lock_name, Mode::Exclusive)
                    .await
                    .expect("waiter acquires");
                (
                    guard,
                    released.load(Ordering::SeqCst),
                    Instant::now(),
                    waiter,
                )
            }
        });
        // The waiter queues in Redis; wait for its entry rather than sleeping.
        let queue_key = format!("{prefix}{{{}}}:queue", lock_name.key_segment());
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.command(&["LLEN", &queue_key]).expect("LLEN") != "1" {
            assert!(Instant::now() < deadline, "the waiter never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !waiting.is_finished(),
            "the waiter must wait for the holder"
        );

        released.store(true, Ordering::SeqCst);
        let released_at = Instant::now();
        held.release().await.expect("holder releases");
        let (guard, saw_release, granted_at, _waiter) =
            tokio::time::timeout(Duration::from_secs(20), waiting)
                .await
                .expect("the grant message arrives long before the 60 s re-check")
                .expect("waiter task");
        assert!(saw_release, "granted only after the release");
        assert!(granted_at >= released_at);
        assert!(
            guard.generation() > held_generation,
            "{} then {}",
            held_generation,
            guard.generation()
        );
        guard.release().await.expect("waiter releases");
        assert!(
            common::calls(&server, "publish") >= 1,
            "the hand-off was published"
        );
    }

    /// Clients that do not trust the server's CA are refused during the
    /// handshake with a typed error that names the problem: one trusting
    /// only another private CA, and one trusting only the system's store.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn untrusted_server_certificate_is_refused() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let server = tls_server(&authority, TlsClientAuth::No, None);
        let prefix = unique_prefix("tls-untrusted");

        let other_authority = Authority::new("Some other CA");
        let result = try_connect(
            RedisConfig::new(server.url())
                .with_tls_root_cert_pem(other_authority.cert_pem.clone())
                .with_key_prefix(prefix.clone()),
        )
        .await;
        assert_handshake_refused(result, "certificate");

        let result =
            try_connect(RedisConfig::new(server.url()).with_key_prefix(prefix.clone())).await;
        assert_handshake_refused(result, "certificate");

        // The same server, trusted: it was the trust, not the server.
        let client = RedisLockClient::connect(
            RedisConfig::new(server.url())
                .with_tls_root_cert_pem(authority.cert_pem.clone())
                .with_key_prefix(prefix),
        )
        .await
        .expect("trusted");
        acquire_and_release(&client, "tls/trusted").await;
    }

    /// A certificate for another host name is refused even when its CA is
    /// trusted: host name verification is on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn certificate_for_another_host_is_refused() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let wrong_host = authority.issue(
            vec!["redis.example.test".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let tls = RedisTls::new(
            wrong_host.cert_pem,
            wrong_host.key_pem,
            authority.cert_pem.clone(),
        );
        let server = RedisServer::spawn(RedisOptions::default().with_tls(tls));
        let result = try_connect(
            RedisConfig::new(server.url())
                .with_tls_root_cert_pem(authority.cert_pem.clone())
                .with_key_prefix(unique_prefix("tls-wrong-host")),
        )
        .await;
        assert_handshake_refused(result, "certificate");
    }

    /// Mutual TLS (`tls-auth-clients yes`): a client presenting a
    /// certificate from the server's CA works; one without a certificate,
    /// or with one from another CA, is refused with a typed error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mutual_tls() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let server = tls_server(&authority, TlsClientAuth::Required, None);
        let prefix = unique_prefix("mtls");
        let base = || {
            RedisConfig::new(server.url())
                .with_tls_root_cert_pem(authority.cert_pem.clone())
                .with_key_prefix(prefix.clone())
        };

        let identity = authority.client("palisade-client");
        let config = base().with_tls_client_cert_pem(identity.cert_pem, identity.key_pem);
        assert!(config.has_tls_client_cert());
        let client = RedisLockClient::connect(config)
            .await
            .expect("a client with a certificate from the CA connects");
        acquire_and_release(&client, "mtls").await;

        let result = try_connect(base()).await;
        assert_client_refused(result);

        let stranger = Authority::new("Some other CA").client("stranger");
        let result =
            try_connect(base().with_tls_client_cert_pem(stranger.cert_pem, stranger.key_pem)).await;
        assert_client_refused(result);
    }

    /// Asserts that the server refused this client's certificate (or its
    /// absence): `PermissionDenied`, like a wrong password, naming the TLS
    /// handshake. The server's refusal is a TLS alert the client reads after
    /// its side of the handshake, so should the connection be reset before
    /// the alert is read, the error is `Unavailable`; either way it is
    /// typed, and not a timeout.
    fn assert_client_refused(result: Result<RedisLockClient, RedisLockError>) {
        let error = result.expect_err("the server must refuse the client");
        match &error {
            RedisLockError::Lock(LockError::PermissionDenied { message, .. }) => {
                assert!(
                    message.contains("TLS handshake with `rediss://"),
                    "{message}"
                );
                assert!(message.contains("with_tls_client_cert_pem"), "{message}");
            }
            RedisLockError::Lock(LockError::Unavailable { .. }) => {}
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
    }

    /// `rediss://...#insecure` skips certificate verification (for tests
    /// only): it connects to a server whose CA it does not know.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn insecure_url_skips_verification() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let server = tls_server(&authority, TlsClientAuth::No, None);
        let client = RedisLockClient::connect(
            RedisConfig::new(format!("{}/#insecure", server.url()))
                .with_key_prefix(unique_prefix("tls-insecure")),
        )
        .await
        .expect("#insecure connects without trusting the CA");
        acquire_and_release(&client, "tls/insecure").await;
    }

    /// A plaintext client pointed at the TLS port gets an error, not a hang.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plaintext_client_on_the_tls_port_fails() {
        common::trace();
        let authority = Authority::new("Palisade test CA");
        let server = tls_server(&authority, TlsClientAuth::No, None);
        let plain_url = server.url().replacen("rediss://", "redis://", 1);
        let result = try_connect(
            RedisConfig::new(plain_url)
                .with_connect_timeout(Duration::from_secs(1))
                .with_key_prefix(unique_prefix("tls-plain")),
        )
        .await;
        let error = result.expect_err("plaintext on a TLS port fails");
        assert!(
            matches!(
                error,
                RedisLockError::Lock(
                    LockError::Unavailable { .. } | LockError::BackendTimeout { .. }
                )
            ),
            "{error:?}"
        );
    }

    /// What can be checked without connecting is checked by `validate`:
    /// PEM that holds no certificate or key, certificates for a plaintext
    /// URL, TLS for some nodes only, and a CA together with `#insecure`.
    #[test]
    fn tls_settings_are_validated_before_connecting() {
        let authority = Authority::new("Palisade test CA");
        let client = authority.client("palisade-client");
        let invalid = |config: RedisConfig, expected: &str| {
            let error = config.validate().expect_err(expected);
            assert!(
                matches!(error, RedisLockError::InvalidConfig { .. }),
                "{error:?}"
            );
            assert!(
                error.to_string().contains(expected),
                "`{error}` should mention `{expected}`"
            );
        };
        let tls_url = "rediss://127.0.0.1:6380";

        let good = RedisConfig::new(tls_url)
            .with_tls_root_cert_pem(authority.cert_pem.clone())
            .with_tls_client_cert_pem(client.cert_pem.clone(), client.key_pem.clone());
        assert!(good.validate().is_ok());
        assert!(good.uses_tls());
        assert_eq!(
            good.tls_root_cert_pem(),
            Some(authority.cert_pem.as_bytes())
        );
        assert!(
            !format!("{good:?}").contains("PRIVATE KEY"),
            "the key is never printed"
        );
        assert!(!RedisConfig::new("redis://127.0.0.1:6379").uses_tls());

        invalid(
            RedisConfig::new(tls_url).with_tls_root_cert_pem("not a certificate"),
            "no `BEGIN CERTIFICATE` block",
        );
        invalid(
            RedisConfig::new(tls_url)
                .with_tls_root_cert_pem(authority.cert_pem.replace("MI", "XX")),
            "root certificate",
        );
        invalid(
            RedisConfig::new(tls_url)
                .with_tls_client_cert_pem(client.cert_pem.clone(), "no key here"),
            "private key",
        );
        invalid(
            RedisConfig::new("redis://127.0.0.1:6379")
                .with_tls_root_cert_pem(authority.cert_pem.clone()),
            "not rediss://",
        );
        invalid(
            RedisConfig::cluster(["rediss://127.0.0.1:7000", "redis://127.0.0.1:7001"]),
            "TLS for every node or for none",
        );
        invalid(
            RedisConfig::new("rediss://127.0.0.1:6380/#insecure")
                .with_tls_root_cert_pem(authority.cert_pem.clone()),
            "#insecure",
        );
    }
}
