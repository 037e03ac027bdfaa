//! The live check: Chubby's CheckSequencer against etcd.

use palisade_core::{Generation, LiveCheck, Liveness, Lock, LockGuard, Mode, Sequencer};

use crate::fixtures::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_check_follows_the_holder() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("livecheck");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    // The resource server's side: its own connection, same prefix.
    let check = palisade_lock_etcd::EtcdLiveCheck::connect(config(&etcd.endpoints(), &prefix))
        .await
        .unwrap();
    let lock = name("livecheck");
    let holder = session(&connection, options(10)).await;
    let waiter = session(&connection, options(10)).await;
    let guard = holder.acquire(&lock, Mode::Exclusive).await.unwrap();
    let sequencer = guard.sequencer().unwrap();
    assert_eq!(sequencer.issuer(), Some(check.issuer()));
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::Held);

    // Survives the text form, as a resource server receives it.
    let parsed: Sequencer = sequencer.to_string().parse().unwrap();
    assert_eq!(check.check(&parsed).await.unwrap(), Liveness::Held);

    // Forgeries and strangers.
    let generation = sequencer.generation();
    let forged = Sequencer::new(
        lock.clone(),
        Mode::Exclusive,
        Generation::new(generation.get() + 1000).unwrap(),
    );
    assert_eq!(check.check(&forged).await.unwrap(), Liveness::NotHeld);
    let wrong_mode = Sequencer::new(lock.clone(), Mode::Shared, generation);
    assert_eq!(check.check(&wrong_mode).await.unwrap(), Liveness::NotHeld);
    let other_issuer = Sequencer::new(lock.clone(), Mode::Exclusive, generation)
        .with_issuer("etcd-elsewhere")
        .unwrap();
    assert_eq!(check.check(&other_issuer).await.unwrap(), Liveness::NotHeld);
    let other_lock = Sequencer::new(name("livecheck/other"), Mode::Exclusive, generation);
    assert_eq!(check.check(&other_lock).await.unwrap(), Liveness::NotHeld);
    let bare = Sequencer::new(lock.clone(), Mode::Exclusive, generation);
    assert_eq!(check.check(&bare).await.unwrap(), Liveness::Held);

    // A queued waiter's key is not a hold, whatever a forger claims.
    let (waiter_lock, waiter_session) = (lock.clone(), waiter.clone());
    let raw_client = raw(&etcd.endpoints()).await;
    let mut queue = DirWatch::start(&raw_client, &lock_dir(&prefix, &lock)).await;
    let waiting =
        tokio::spawn(async move { waiter_session.acquire(&waiter_lock, Mode::Exclusive).await });
    queue.next_put().await;
    let mut raw_client = raw_client;
    let waiter_key = format!("{}{:016x}", lock_dir(&prefix, &lock), waiter.lease_id());
    let waiter_revision =
        raw_client.get(waiter_key, None).await.unwrap().kvs()[0].create_revision();
    let claims_waiter = Sequencer::new(
        lock.clone(),
        Mode::Exclusive,
        Generation::new(waiter_revision as u64).unwrap(),
    );
    assert_eq!(
        check.check(&claims_waiter).await.unwrap(),
        Liveness::NotHeld
    );

    // The holder's lease ends: its sequencer is no longer live, and the
    // waiter's grant is.
    raw_client.lease_revoke(holder.lease_id()).await.unwrap();
    assert_eq!(check.check(&sequencer).await.unwrap(), Liveness::NotHeld);
    let next = waiting.await.unwrap().unwrap();
    assert_eq!(next.generation().get(), waiter_revision as u64);
    let next_sequencer = next.sequencer().unwrap();
    assert_eq!(check.check(&next_sequencer).await.unwrap(), Liveness::Held);
    // A clean release ends it too.
    next.release().await.unwrap();
    assert_eq!(
        check.check(&next_sequencer).await.unwrap(),
        Liveness::NotHeld
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_check_sees_every_reader() {
    let etcd = crate::fixtures::etcd();
    let prefix = unique_prefix("livecheck-shared");
    let connection = connect(&etcd.endpoints(), &prefix).await;
    let check = connection.live_check().into_shared();
    let lock = name("readers");
    let first = session(&connection, options(10)).await;
    let second = session(&connection, options(10)).await;
    let r1 = first.acquire(&lock, Mode::Shared).await.unwrap();
    let r2 = second.acquire(&lock, Mode::Shared).await.unwrap();
    for guard in [&r1, &r2] {
        let liveness = check.check_dyn(&guard.sequencer().unwrap()).await.unwrap();
        assert_eq!(liveness, Liveness::Held);
    }
    let r1_sequencer = r1.sequencer().unwrap();
    r1.release().await.unwrap();
    assert_eq!(
        check.check_dyn(&r1_sequencer).await.unwrap(),
        Liveness::NotHeld
    );
    assert_eq!(
        check.check_dyn(&r2.sequencer().unwrap()).await.unwrap(),
        Liveness::Held
    );
    r2.release().await.unwrap();
}
