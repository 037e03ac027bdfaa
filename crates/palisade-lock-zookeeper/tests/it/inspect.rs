//! Forced release and the live check, against a real ZooKeeper.

use std::time::Duration;

use palisade_core::{
    ForceRelease, LeaseState, LiveCheck, Liveness, Lock, LockGuard, LockName, LostReason, Mode,
};

use crate::fixtures::{options, session, started};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_ends_only_the_named_hold_and_the_live_check_follows() {
    let (_server, client) = started("force").await;
    let check = client.live_check();
    let (alice, bob) = (
        session(&client, options(Duration::from_secs(4))).await,
        session(&client, options(Duration::from_secs(4))).await,
    );
    let name = LockName::new("jobs/1").unwrap();
    let held = alice.acquire(&name, Mode::Exclusive).await.unwrap();
    let sequencer = held.sequencer().unwrap();
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::Held);

    // A wrong generation ends nothing.
    let wrong = palisade_core::Generation::new(sequencer.generation().get() + 1).unwrap();
    assert!(!client.force_release(&name, wrong).await.unwrap());
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::Held);

    let waiter = tokio::spawn({
        let (bob, name) = (bob.clone(), name.clone());
        async move { bob.acquire(&name, Mode::Exclusive).await }
    });
    assert!(
        client
            .force_release(&name, sequencer.generation())
            .await
            .unwrap()
    );
    let mut lease = held.lease();
    let lost = tokio::time::timeout(Duration::from_secs(5), lease.lost()).await;
    assert_eq!(lost.unwrap(), LeaseState::Lost(LostReason::KeyDeleted));
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is woken without a lock-delay")
        .unwrap()
        .unwrap();
    assert!(next.generation() > sequencer.generation());
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::NotHeld);
    assert_eq!(
        check.check(&next.sequencer().unwrap()).await.unwrap(),
        Liveness::Held
    );
    assert!(
        held.release().await.is_err(),
        "the evicted holder no longer owns it"
    );
    next.release().await.unwrap();
}

/// A hold granted from an empty directory lists nothing, so it has no
/// watch from a listing: its node is watched from one keep-alive interval
/// on, and a forced release with nobody waiting is still reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_release_of_an_uncontended_hold_is_noticed_within_a_keepalive_interval() {
    let (_server, client) = started("force-alone").await;
    let options = options(Duration::from_secs(4));
    let interval = options.keepalive_interval();
    let alice = session(&client, options).await;
    let name = LockName::new("jobs/alone").unwrap();
    let held = alice.acquire(&name, Mode::Exclusive).await.unwrap();
    let generation = held.generation();
    assert!(client.force_release(&name, generation).await.unwrap());
    let mut lease = held.lease();
    // The interval, then the watch's request and its event: generous
    // margins for a loaded machine.
    let lost = tokio::time::timeout(interval + Duration::from_secs(5), lease.lost()).await;
    assert_eq!(
        lost.expect("the forced release is reported within the interval and its margin"),
        LeaseState::Lost(LostReason::KeyDeleted)
    );
    assert!(held.release().await.is_err());
}
