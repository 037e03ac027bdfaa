//! The recipe conformance suite: `palisade-recipes`' election, semaphore
//! and striping, run on a lock backend.
//!
//! A backend runs it through the lock suite's own view of it
//! ([`SuiteBackend`], [`SuiteInspect`]):
//!
//! ```text
//! recipe_suite::test_all(&backend).await;       // with an inspection API
//! recipe_suite::test_striping(&backend).await;  // Lock alone (Redlock)
//! ```
//!
//! # Cases
//!
//! | case | checks |
//! | --- | --- |
//! | [`one_leader_per_term`] | contending candidates: never two leaders at once; terms only grow |
//! | [`observer_sees_every_change`] | an observer sees each leader, value, resignation and takeover, in order, on hints alone where the service watches; a lost leadership is signalled and its term refused |
//! | [`paused_leader_is_fenced`] | a leader whose lease ended wakes after a new election: the fenced store refuses its write |
//! | [`unpublishable_value_refused`] | a value no lock name can carry is refused before anything is taken |
//! | [`at_most_n_permits`] | contending sessions: never more than N permit holders |
//! | [`permit_count_checked`] | a client with another N is refused and takes nothing |
//! | [`permit_waiters`] | a waiter is granted the first permit released; the waiter bound refuses one more |
//! | [`paused_permit_holder_is_fenced`] | a permit holder whose lease ended: its late write is refused |
//! | [`striped_totals_conserved`] | concurrent takers and a rebalance: nothing oversold, nothing lost |
//!
//! Writes go to a real fenced store (`palisade-store` on sled, in a
//! temporary directory), as the resource server would make them. Waits are
//! bounded by the backend's [`SuiteBackend::min_ttl`], with the lock
//! suite's margins.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use palisade_core::op::Op;
use palisade_core::{BoxError, Inspect, LockName, Sequencer};
use palisade_recipes::{Election, Leader, RecipeError, SegmentStore, Semaphore, Striped};
use palisade_store::{Durability, Store, StoreConfig};
use tokio::time::Instant;

use crate::lock_suite::{Case, SuiteBackend, SuiteInspect};

/// Every case, in order.
pub async fn test_all<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
    B::Inspector: Clone,
{
    test_election(backend).await;
    test_semaphore(backend).await;
    test_striping(backend).await;
}

/// The election's cases.
pub async fn test_election<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
    B::Inspector: Clone,
{
    run(backend, "one_leader_per_term", one_leader_per_term(backend)).await;
    run(
        backend,
        "observer_sees_every_change",
        observer_sees_every_change(backend),
    )
    .await;
    run(
        backend,
        "paused_leader_is_fenced",
        paused_leader_is_fenced(backend),
    )
    .await;
    run(
        backend,
        "unpublishable_value_refused",
        unpublishable_value_refused(backend),
    )
    .await;
}

/// The semaphore's cases.
pub async fn test_semaphore<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    run(backend, "at_most_n_permits", at_most_n_permits(backend)).await;
    run(
        backend,
        "permit_count_checked",
        permit_count_checked(backend),
    )
    .await;
    run(backend, "permit_waiters", permit_waiters(backend)).await;
    run(
        backend,
        "paused_permit_holder_is_fenced",
        paused_permit_holder_is_fenced(backend),
    )
    .await;
}

/// The striping cases: they need [`Lock`](palisade_core::Lock) alone, so every backend runs
/// them (Redlock included).
pub async fn test_striping<B: SuiteBackend>(backend: &B) {
    run(
        backend,
        "striped_totals_conserved",
        striped_totals_conserved(backend),
    )
    .await;
}

async fn run<B: SuiteBackend>(backend: &B, case: &str, body: impl Future<Output = ()>) {
    println!("recipe suite [{}] {case}: running", backend.name());
    let started = Instant::now();
    body.await;
    println!(
        "recipe suite [{}] {case}: ok ({:.1?})",
        backend.name(),
        started.elapsed()
    );
}

/// Contending candidates, each elected a few times: at no moment two
/// leaders, and each term above every earlier one.
pub async fn one_leader_per_term<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    const CANDIDATES: usize = 3;
    const TERMS_EACH: usize = 3;
    let case = Case::recipe(backend, "one_leader_per_term");
    let election = Election::new(case.name("election"));
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut candidates = Vec::new();
    for candidate in 0..CANDIDATES {
        let session = case.open().await;
        let (election, leading, terms) = (election.clone(), leading.clone(), terms.clone());
        candidates.push(tokio::spawn(async move {
            for _ in 0..TERMS_EACH {
                let leadership = election
                    .campaign(&session, &format!("candidate-{candidate}"))
                    .await
                    .map_err(|error| format!("campaign failed: {error}"))?;
                let others = leading.fetch_add(1, Ordering::SeqCst);
                terms.lock().unwrap().push(leadership.generation().get());
                tokio::time::sleep(Duration::from_millis(20)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                if others != 0 {
                    return Err(format!(
                        "elected in term {} while {others} other leader(s) led",
                        leadership.generation()
                    ));
                }
                leadership
                    .resign()
                    .await
                    .map_err(|error| format!("resign failed: {error}"))?;
            }
            Ok::<_, String>(())
        }));
    }
    let bound = case.recipe_handoff() * (CANDIDATES * TERMS_EACH) as u32 + Duration::from_secs(10);
    for candidate in candidates {
        match case.within(bound, candidate, "the candidates' terms").await {
            Ok(Ok(())) => {}
            Ok(Err(message)) => case.fail(message),
            Err(panic) => case.fail(format_args!("a candidate panicked: {panic}")),
        }
    }
    let terms = terms.lock().unwrap().clone();
    if terms.len() != CANDIDATES * TERMS_EACH || terms.windows(2).any(|pair| pair[0] >= pair[1]) {
        case.fail(format_args!(
            "expected {} strictly growing terms in election order, got {terms:?}",
            CANDIDATES * TERMS_EACH
        ));
    }
}

/// An observer sees, in order: A elected with its value, A's new value,
/// nobody after A resigns, B elected, and C after B's lease ended. B is
/// told it lost, and its term is refused.
pub async fn observer_sees_every_change<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
    B::Inspector: Clone,
{
    let case = Case::recipe(backend, "observer_sees_every_change");
    // A service that watches is not polled: its observer reads once an
    // hour but on a hint, so a change its watch misses fails the case.
    let name = case.name("election");
    let pushed = match backend
        .inspector()
        .changes(name.as_str(), Duration::from_millis(20))
        .await
    {
        Ok(changes) => changes.is_pushed(),
        Err(error) => case.fail(format_args!("watching the election: {error}")),
    };
    if backend.watches() && !pushed {
        case.fail("the inspector polls, but this backend's service can watch");
    }
    let poll = if pushed {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(20)
    };
    let election = Election::new(name).with_poll_interval(poll);
    let mut observer = Box::pin(election.observe(backend.inspector().clone()));
    let mut next = async |what: &str| -> Option<Leader> {
        match case
            .within(case.recipe_expiry(), observer.next(), what)
            .await
        {
            Some(Ok(leader)) => leader,
            Some(Err(error)) => case.fail(format_args!("observing {what}: {error}")),
            None => case.fail(format_args!("the observer's stream ended before {what}")),
        }
    };
    let seen = |leader: Option<Leader>, term: Option<u64>, value: Option<&str>, what: &str| {
        let got = leader
            .as_ref()
            .map(|leader| (leader.term.get(), leader.value.as_deref()));
        let want = term.map(|term| (term, value));
        if got != want {
            case.fail(format_args!(
                "{what}: expected the observer to see {want:?}, it saw {got:?}"
            ));
        }
    };
    seen(
        next("the first state").await,
        None,
        None,
        "before any campaign",
    );

    let (a, b, c) = (case.open().await, case.open().await, case.open().await);
    let mut alice = case.campaign(&election, &a, "a:1").await;
    let term_a = alice.generation().get();
    seen(
        next("A elected").await,
        Some(term_a),
        Some("a:1"),
        "A elected",
    );
    if let Err(error) = alice.proclaim("a:2").await {
        case.fail(format_args!("A's proclaim failed: {error}"));
    }
    seen(
        next("A's new value").await,
        Some(term_a),
        Some("a:2"),
        "A proclaimed",
    );
    if let Err(error) = alice.resign().await {
        case.fail(format_args!("A's resign failed: {error}"));
    }
    seen(next("A resigned").await, None, None, "A resigned");

    let bob = case.campaign(&election, &b, "b").await;
    let term_b = bob.generation().get();
    if term_b <= term_a {
        case.fail(format_args!("B's term {term_b} is not above A's {term_a}"));
    }
    seen(
        next("B elected").await,
        Some(term_b),
        Some("b"),
        "B elected",
    );
    let carol = {
        let (election, c) = (election.clone(), c.clone());
        tokio::spawn(async move { election.campaign(&c, "c").await })
    };
    let mut lost = bob.lease();
    backend.kill_lease(&b).await;
    case.within(case.recipe_expiry(), lost.lost(), "B's leadership lost")
        .await;
    if bob.term().is_ok() {
        case.fail("B's term is still handed out after its leadership was lost");
    }
    let carol = match case.within(case.recipe_expiry(), carol, "C elected").await {
        Ok(Ok(carol)) => carol,
        other => case.fail(format_args!("C's campaign: {other:?}")),
    };
    let term_c = carol.generation().get();
    if term_c <= term_b {
        case.fail(format_args!("C's term {term_c} is not above B's {term_b}"));
    }
    seen(
        next("C elected").await,
        Some(term_c),
        Some("c"),
        "C took over",
    );
    drop(bob);
    let _ = carol.resign().await;
}

/// A leader whose lease ends (as a pause past it would end it) wakes after
/// a new leader was elected and wrote: the fenced store refuses its write.
pub async fn paused_leader_is_fenced<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    let case = Case::recipe(backend, "paused_leader_is_fenced");
    let store = FencedStore::open(&case);
    let election = Election::new(case.name("election"));
    let (a, b) = (case.open().await, case.open().await);
    let old = case.campaign(&election, &a, "old").await;
    let old_term = old.issued().clone();
    store
        .expect_write(&case, &old_term, 1, "the first leader's write")
        .await;
    let mut lost = old.lease();
    backend.kill_lease(&a).await;
    case.within(case.recipe_expiry(), lost.lost(), "the old leadership lost")
        .await;
    let new = case.campaign(&election, &b, "new").await;
    let new_term = match new.term() {
        Ok(term) => term,
        Err(error) => case.fail(format_args!("the new leader's term refused: {error}")),
    };
    store
        .expect_write(&case, &new_term, 2, "the new leader's write")
        .await;
    if store.write(&old_term, 3).await.is_ok() {
        case.fail(format_args!(
            "the store accepted the old leader's late write with term {} after term {} wrote",
            old_term.generation(),
            new_term.generation()
        ));
    }
    if store.read_plain(&case, &new_term).await != Some(2) {
        case.fail("the refused write changed the value");
    }
    drop(old);
    let _ = new.resign().await;
}

/// A value no lock name can carry is refused, and nothing is taken.
pub async fn unpublishable_value_refused<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    let case = Case::recipe(backend, "unpublishable_value_refused");
    let election = Election::new(case.name("election"));
    let session = case.open().await;
    for value in ["x".repeat(LockName::MAX_LEN), "line\nbreak".to_owned()] {
        match election.campaign(&session, &value).await {
            Err(RecipeError::Value { .. }) => {}
            other => case.fail(format_args!(
                "campaign with {value:.20?}: expected a value error, got {other:?}"
            )),
        }
    }
    match election.leader(backend.inspector()).await {
        Ok(None) => {}
        other => case.fail(format_args!("a refused campaign left a leader: {other:?}")),
    }
}

/// Sessions contending for N permits: never more than N hold one at once.
pub async fn at_most_n_permits<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    const PERMITS: u32 = 3;
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 3;
    let case = Case::recipe(backend, "at_most_n_permits");
    let semaphore = match Semaphore::new(case.name("pool"), PERMITS) {
        Ok(semaphore) => semaphore,
        Err(error) => case.fail(error),
    };
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let session = case.open().await;
        let inspector = backend.inspector();
        let (semaphore, holding, most) = (semaphore.clone(), holding.clone(), most.clone());
        clients.push(async move {
            for _ in 0..ROUNDS {
                let permit = semaphore
                    .acquire(&session, inspector)
                    .await
                    .map_err(|error| format!("acquire failed: {error}"))?;
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                permit
                    .release()
                    .await
                    .map_err(|error| format!("release failed: {error}"))?;
            }
            Ok::<_, String>(())
        });
    }
    let bound = case.recipe_handoff() * (CLIENTS * ROUNDS) as u32 + Duration::from_secs(10);
    let outcomes = case
        .within(
            bound,
            futures::future::join_all(clients),
            "every client's rounds",
        )
        .await;
    for outcome in outcomes {
        if let Err(message) = outcome {
            case.fail(message);
        }
    }
    let most = most.load(Ordering::SeqCst);
    if most > PERMITS as usize {
        case.fail(format_args!(
            "{most} permit holders at once; the semaphore has {PERMITS}"
        ));
    }
}

/// A client created with another permit count is refused while permits are
/// held, and takes none.
pub async fn permit_count_checked<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    let case = Case::recipe(backend, "permit_count_checked");
    let three = Semaphore::new(case.name("pool"), 3).unwrap_or_else(|error| case.fail(error));
    let four = Semaphore::new(case.name("pool"), 4).unwrap_or_else(|error| case.fail(error));
    let (a, b) = (case.open().await, case.open().await);
    let inspector = backend.inspector();
    let held = match three.try_acquire(&a, inspector).await {
        Ok(Some(permit)) => permit,
        other => case.fail(format_args!("a free permit: {other:?}")),
    };
    match four.try_acquire(&b, inspector).await {
        Err(RecipeError::PermitCountMismatch {
            ours: 4, theirs: 3, ..
        }) => {}
        other => case.fail(format_args!(
            "try_acquire with 4 permits beside 3: expected a mismatch, got {other:?}"
        )),
    }
    match case
        .within(
            case.recipe_handoff(),
            four.acquire(&b, inspector),
            "a refused acquire",
        )
        .await
    {
        Err(RecipeError::PermitCountMismatch { .. }) => {}
        other => case.fail(format_args!(
            "acquire with 4 permits beside 3: expected a mismatch, got {other:?}"
        )),
    }
    match four.held(inspector).await {
        Ok(0) => {}
        other => case.fail(format_args!("the refused client holds permits: {other:?}")),
    }
    let _ = held.release().await;
}

/// With every permit held a waiter gets the first one released; with the
/// waiter bound reached, one more waiter is refused at once.
pub async fn permit_waiters<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    let case = Case::recipe(backend, "permit_waiters");
    let semaphore = Semaphore::new(case.name("pool"), 2)
        .and_then(|semaphore| semaphore.with_max_waiters(1))
        .unwrap_or_else(|error| case.fail(error));
    let inspector = backend.inspector();
    let (a, b, c, d) = (
        case.open().await,
        case.open().await,
        case.open().await,
        case.open().await,
    );
    let first = case
        .within(
            case.recipe_handoff(),
            semaphore.acquire(&a, inspector),
            "permit 1",
        )
        .await;
    let second = case
        .within(
            case.recipe_handoff(),
            semaphore.acquire(&b, inspector),
            "permit 2",
        )
        .await;
    let (first, second) = match (first, second) {
        (Ok(first), Ok(second)) => (first, second),
        other => case.fail(format_args!("two free permits: {other:?}")),
    };
    if first.index() == second.index() {
        case.fail("two sessions were given the same permit");
    }
    let mut waiter = Box::pin(semaphore.acquire(&c, inspector));
    if tokio::time::timeout(crate::lock_suite::SETTLE, waiter.as_mut())
        .await
        .is_ok()
    {
        case.fail("a third permit was granted while both were held");
    }
    match semaphore.acquire(&d, inspector).await {
        Err(RecipeError::Busy { .. }) => {}
        other => case.fail(format_args!(
            "a second waiter beyond the bound of 1: expected busy, got {other:?}"
        )),
    }
    let freed = second.index();
    let _ = second.release().await;
    let third = match case
        .within(case.recipe_handoff(), waiter, "the waiter's grant")
        .await
    {
        Ok(permit) => permit,
        Err(error) => case.fail(format_args!("the waiter: {error}")),
    };
    if third.index() != freed {
        case.fail(format_args!(
            "the waiter got permit {}, but {freed} was the one freed",
            third.index()
        ));
    }
    let _ = third.release().await;
    let _ = first.release().await;
}

/// A permit holder whose lease ends (as a pause past it would end it): the
/// next holder of its permit writes, and the old holder's late write is
/// refused.
pub async fn paused_permit_holder_is_fenced<B: SuiteInspect>(backend: &B)
where
    B::Lock: Clone,
{
    let case = Case::recipe(backend, "paused_permit_holder_is_fenced");
    let store = FencedStore::open(&case);
    let semaphore = Semaphore::new(case.name("pool"), 1).unwrap_or_else(|error| case.fail(error));
    let inspector = backend.inspector();
    let (a, b) = (case.open().await, case.open().await);
    let old = match semaphore.try_acquire(&a, inspector).await {
        Ok(Some(permit)) => permit,
        other => case.fail(format_args!("the free permit: {other:?}")),
    };
    let old_sequencer = old.issued().clone();
    store
        .expect_write(&case, &old_sequencer, 1, "the first holder's write")
        .await;
    let mut lost = old.lease();
    backend.kill_lease(&a).await;
    case.within(
        case.recipe_expiry(),
        lost.lost(),
        "the old permit's lease lost",
    )
    .await;
    let new = match case
        .within(
            case.recipe_expiry(),
            semaphore.acquire(&b, inspector),
            "the permit again",
        )
        .await
    {
        Ok(permit) => permit,
        Err(error) => case.fail(format_args!("the permit after the lease ended: {error}")),
    };
    let new_sequencer = new.sequencer().unwrap_or_else(|error| case.fail(error));
    store
        .expect_write(&case, &new_sequencer, 2, "the new holder's write")
        .await;
    if store.write(&old_sequencer, 3).await.is_ok() {
        case.fail("the store accepted the paused permit holder's late write");
    }
    drop(old);
    let _ = new.release().await;
}

/// Takers on their own sessions take one unit at a time from a striped
/// quantity while another session rebalances: they take exactly the total,
/// and every segment ends empty.
pub async fn striped_totals_conserved<B: SuiteBackend>(backend: &B) {
    const TOTAL: u64 = 40;
    const TAKERS: usize = 4;
    let case = Case::recipe(backend, "striped_totals_conserved");
    let store = Arc::new(FencedStore::open(&case));
    let striped = Striped::new(case.name("stock"), 4).unwrap_or_else(|error| case.fail(error));
    let owner = case.open().await;
    if let Err(error) = striped.fill(&owner, &*store, TOTAL).await {
        case.fail(format_args!("fill: {error}"));
    }
    let taken = Arc::new(AtomicU64::new(0));
    let mut takers = Vec::new();
    for _ in 0..TAKERS {
        let session = case.open().await;
        let (striped, store, taken) = (striped.clone(), store.clone(), taken.clone());
        takers.push(tokio::spawn(async move {
            while let Some(_took) = striped
                .take(&session, &*store, 1)
                .await
                .map_err(|error| format!("take failed: {error}"))?
            {
                taken.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, String>(())
        }));
    }
    let rebalanced = striped.rebalance(&owner, &*store).await;
    if let Err(error) = rebalanced {
        case.fail(format_args!("rebalance: {error}"));
    }
    let bound = case.recipe_handoff() * TOTAL as u32 + Duration::from_secs(10);
    for taker in takers {
        match case.within(bound, taker, "the takers").await {
            Ok(Ok(())) => {}
            other => case.fail(format_args!("a taker: {other:?}")),
        }
    }
    let taken = taken.load(Ordering::SeqCst);
    let left = striped
        .amounts(&owner, &*store)
        .await
        .unwrap_or_else(|error| case.fail(error));
    if taken != TOTAL || left.iter().any(|&amount| amount != 0) {
        case.fail(format_args!(
            "{taken} of {TOTAL} taken, segments left with {left:?}: expected all {TOTAL} taken and none left"
        ));
    }
}

/// A real fenced store in a temporary directory: the resource server's
/// engine, one `u64` per lock.
pub struct FencedStore {
    store: Store,
    _dir: tempfile::TempDir,
}

const QUANTITY: &[u8] = b"quantity";

impl FencedStore {
    fn open<B: SuiteBackend>(case: &Case<'_, B>) -> FencedStore {
        let dir = tempfile::tempdir().unwrap_or_else(|error| case.fail(error));
        let config = StoreConfig {
            durability: Durability::buffered(),
            ..StoreConfig::default()
        };
        let store = Store::open(dir.path(), config).unwrap_or_else(|error| case.fail(error));
        FencedStore { store, _dir: dir }
    }

    async fn expect_write<B: SuiteBackend>(
        &self,
        case: &Case<'_, B>,
        sequencer: &Sequencer,
        value: u64,
        what: &str,
    ) {
        if let Err(error) = self.write(sequencer, value).await {
            case.fail(format_args!("{what} with {sequencer} was refused: {error}"));
        }
    }

    /// The value, read without a sequencer.
    async fn read_plain<B: SuiteBackend>(
        &self,
        case: &Case<'_, B>,
        sequencer: &Sequencer,
    ) -> Option<u64> {
        let pending = self
            .store
            .submit_get(sequencer.lock(), QUANTITY, None)
            .unwrap_or_else(|error| case.fail(error));
        match pending.await {
            Ok(Ok(read)) => read.value.map(|bytes| decode(&bytes)),
            other => case.fail(format_args!("plain read: {other:?}")),
        }
    }
}

fn decode(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap_or([0xff; 8]))
}

impl SegmentStore for FencedStore {
    async fn read(&self, sequencer: &Sequencer) -> Result<Option<u64>, BoxError> {
        let read = self
            .store
            .submit_get(sequencer.lock(), QUANTITY, Some(sequencer))?
            .await??;
        Ok(read.value.map(|bytes| decode(&bytes)))
    }

    async fn write(&self, sequencer: &Sequencer, quantity: u64) -> Result<(), BoxError> {
        let ops = [Op::put(QUANTITY.to_vec(), quantity.to_be_bytes().to_vec())];
        self.store.submit(sequencer, &ops, None)?.await??;
        Ok(())
    }
}

/// What the recipe cases add to the lock suite's case context.
impl<'b, B: SuiteBackend> Case<'b, B> {
    fn recipe(backend: &'b B, case: &'static str) -> Self {
        Case::in_suite("recipe suite", backend, case)
    }

    /// A session with the backend's shortest TTL, as the lock suite's.
    async fn open(&self) -> B::Lock {
        self.backend.session(self.options()).await
    }

    /// A lock suite hand-off, doubled for a recipe's extra round trips.
    fn recipe_handoff(&self) -> Duration {
        self.handoff() * 2
    }

    /// A killed lease reported lost and what follows from it: the lock
    /// suite's expiry plus a recipe hand-off.
    fn recipe_expiry(&self) -> Duration {
        self.expiry() + self.recipe_handoff()
    }

    async fn within<T>(&self, bound: Duration, future: impl Future<Output = T>, what: &str) -> T {
        match tokio::time::timeout(bound, future).await {
            Ok(value) => value,
            Err(_) => self.fail(format_args!("{what}: not within {bound:?}")),
        }
    }

    async fn campaign(
        &self,
        election: &Election,
        session: &B::Lock,
        value: &str,
    ) -> palisade_recipes::Leadership<B::Lock>
    where
        B::Lock: Clone,
    {
        match self
            .within(
                self.recipe_expiry(),
                election.campaign(session, value),
                "a campaign",
            )
            .await
        {
            Ok(leadership) => leadership,
            Err(error) => self.fail(format_args!("campaign for {value:?}: {error}")),
        }
    }
}
