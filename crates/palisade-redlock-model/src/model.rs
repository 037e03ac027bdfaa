//! An exhaustive model check of the Redlock protocol with its quorum-minted
//! generation (`palisade-lock-redis`'s `src/redlock/`, `docs/backends/redis.md`, "Redlock").
//!
//! The model is small and explicit: three masters, two or three clients,
//! discrete time. Every request is a message in flight that the scheduler
//! may deliver at any later step, or never before the horizon (a master
//! that answers late, a request applied after its sender gave up); a
//! client reads the answers when it next moves, and ignores answers to a
//! phase it has left. Time advances by one tick as a step of its own, so a client can be
//! paused between any two of its steps for any number of ticks. A depth-
//! first search visits every reachable state (deduplicated), and checks:
//!
//! - **unique**: no two attempts ever get a majority to accept the same
//!   generation (whether or not the holder is still valid);
//! - **ordered**: a grant whose floor reads were sent after another grant
//!   completed has a higher generation;
//! - **exclusive**: no two clients hold a valid grant at the same tick.
//!
//! The protocol, per attempt: `SET NX PX` on every master (majority
//! needed); read every master's generation floor (majority of answers);
//! choose `max + 1` (in the three-minter search also `max + 2`, as the
//! implementation's clock term may choose any value above); compare-and-set "raise the floor to g if it is below
//! g" on every master (majority needed); granted if still valid by the
//! client's clock (start of the attempt + TTL - drift).
//!
//! Three searches keep the state space exhaustible on a small machine:
//! the generation alone with no lock at all (any number of minters side by
//! side: the properties must not lean on mutual exclusion), the lock alone
//! with time (exclusion within validity, expiry, pauses), and both together
//! over fewer steps. The checker must find the bug when the compare-and-set
//! is replaced by a blind `SET`, and when the drift allowance is left out.

use std::collections::HashSet;
use std::fmt;

const MASTERS: usize = 3;
const MAJORITY: usize = MASTERS / 2 + 1;
/// How long a master keeps a lock key, in ticks.
const TTL: u8 = 3;
/// How much faster than the clients' clocks a master's clock may run over
/// one TTL: a key set at tick t may expire at `t + TTL - MASTER_FAST`.
const MASTER_FAST: u8 = 1;
/// A search that grows past this many states is stopped (memory).
const STATE_LIMIT: usize = 5_000_000;

/// The variant of the protocol under check.
#[derive(Clone, Copy, Debug)]
struct Protocol {
    /// Take the lock on a majority first (the Redlock part).
    lock: bool,
    /// Mint the generation (the floor read and compare-and-set).
    mint: bool,
    /// The floor write: compare-and-set (raise only if below) or blind.
    compare_and_set: bool,
    /// Ticks a client takes off its validity for clock drift.
    drift: u8,
}

const CORRECT: Protocol = Protocol {
    lock: true,
    mint: true,
    compare_and_set: true,
    drift: MASTER_FAST,
};

/// The search's bounds.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    clients: usize,
    attempts: u8,
    horizon: u8,
    /// Whether a client may choose a generation above `floor + 1`.
    jumps: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Request {
    /// `SET lock token NX PX ttl`.
    Lock { token: u8 },
    /// `GET floor`.
    ReadFloor,
    /// Raise the floor to `generation` (compare-and-set, or blind).
    SetFloor { generation: u8 },
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Reply {
    Locked(bool),
    Floor(u8),
    FloorSet(bool),
}

/// A request from `client` to `master` in flight; `tag` names the client's
/// attempt and phase. A master answers as it applies the request; the
/// client reads the answers when it next moves, so an answer that arrives
/// after the client has decided is an answer it ignores.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Packet {
    client: u8,
    master: u8,
    tag: u8,
    request: Request,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Master {
    /// The lock key: owner token and the tick it expires at (master clock).
    lock: Option<(u8, u8)>,
    floor: u8,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    Locking,
    Reading,
    Setting,
    /// A majority taken (and the generation minted): the validity check
    /// is a step of its own, so a pause can come before it.
    Granting,
    Holding,
    Done,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Client {
    phase: Phase,
    /// Attempts finished (or given up).
    attempts: u8,
    /// The tick the attempt's first request was sent: validity counts from
    /// there.
    started: u8,
    /// This phase's answers so far: each master answers a phase's request
    /// once, so counts (and the highest floor read) say all the client
    /// uses, and states that differ only in which master answered merge.
    answers: Answers,
    /// The generation chosen.
    generation: u8,
    /// The highest generation granted (to anyone) before this attempt's
    /// floor reads were sent.
    must_exceed: u8,
}

impl Client {
    fn token(&self, index: usize) -> u8 {
        (index as u8) * 16 + self.attempts
    }

    fn tag(&self) -> u8 {
        self.attempts * 8
            + match self.phase {
                Phase::Locking => 1,
                Phase::Reading => 2,
                Phase::Setting => 3,
                _ => 0,
            }
    }

    fn valid_until(&self, protocol: Protocol) -> u8 {
        self.started + TTL - protocol.drift
    }

    /// Locks taken, floors read, or floors raised, in this phase.
    fn successes(&self) -> usize {
        usize::from(self.answers.yes)
    }

    fn answered(&self) -> usize {
        usize::from(self.answers.yes + self.answers.no)
    }
}

#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
struct Answers {
    /// Lock taken, floor raised, or floor read.
    yes: u8,
    /// Lock refused or floor not raised.
    no: u8,
    /// The highest floor read.
    highest_floor: u8,
}

impl Answers {
    fn record(&mut self, reply: Reply) {
        match reply {
            Reply::Locked(true) | Reply::FloorSet(true) => self.yes += 1,
            Reply::Locked(false) | Reply::FloorSet(false) => self.no += 1,
            Reply::Floor(floor) => {
                self.yes += 1;
                self.highest_floor = self.highest_floor.max(floor);
            }
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: u8,
    masters: [Master; MASTERS],
    clients: Vec<Client>,
    /// Sorted, so that states equal up to message order are one state.
    network: Vec<Packet>,
    /// Generations some majority accepted (bit g).
    minted: u64,
    /// The highest generation granted so far.
    highest_granted: u8,
}

/// One step of the scheduler.
#[derive(Clone, Copy, Debug)]
enum Step {
    Tick,
    Deliver(Packet),
    /// The client moves; when it chooses a generation, it takes the
    /// highest floor read plus 1 plus this much (the implementation's
    /// clock term can choose any value above the floors).
    Client(usize, u8),
}

/// What the checker found.
#[derive(Debug)]
struct Violation {
    property: &'static str,
    detail: String,
    trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} violated: {}", self.property, self.detail)?;
        for (index, step) in self.trace.iter().enumerate() {
            writeln!(f, "  {index:3}. {step}")?;
        }
        Ok(())
    }
}

struct Checker {
    protocol: Protocol,
    bounds: Bounds,
}

impl Checker {
    fn initial(&self) -> State {
        State {
            now: 0,
            masters: [Master {
                lock: None,
                floor: 0,
            }; MASTERS],
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    attempts: 0,
                    started: 0,
                    answers: Answers::default(),
                    generation: 0,
                    must_exceed: 0,
                };
                self.bounds.clients
            ],
            network: Vec::new(),
            minted: 0,
            highest_granted: 0,
        }
    }

    fn steps(&self, state: &State) -> Vec<Step> {
        let mut steps = Vec::new();
        let busy = state
            .clients
            .iter()
            .any(|client| client.phase != Phase::Done);
        if busy && state.now < self.bounds.horizon {
            steps.push(Step::Tick);
        }
        let mut seen = HashSet::new();
        for packet in &state.network {
            if seen.insert(*packet) {
                steps.push(Step::Deliver(*packet));
            }
        }
        for (index, client) in state.clients.iter().enumerate() {
            if self.client_can_move(client) {
                steps.push(Step::Client(index, 0));
                if client.phase == Phase::Reading && self.bounds.jumps {
                    steps.push(Step::Client(index, 1));
                }
            }
        }
        steps
    }

    fn client_can_move(&self, client: &Client) -> bool {
        let majority_failed = |ok: usize| client.answered() - ok > MASTERS - MAJORITY;
        match client.phase {
            Phase::Idle => client.attempts < self.bounds.attempts,
            Phase::Locking => {
                let ok = client.successes();
                ok >= MAJORITY || majority_failed(ok)
            }
            Phase::Reading => client.answered() >= MAJORITY,
            Phase::Setting => {
                let ok = client.successes();
                ok >= MAJORITY || majority_failed(ok)
            }
            Phase::Granting | Phase::Holding => true,
            Phase::Done => false,
        }
    }

    /// Applies `step`; `Err` if it breaks a property.
    fn apply(&self, state: &mut State, step: Step) -> Result<(), (&'static str, String)> {
        match step {
            Step::Tick => state.now += 1,
            Step::Deliver(packet) => {
                let at = state
                    .network
                    .iter()
                    .position(|p| *p == packet)
                    .expect("delivered packet is in flight");
                state.network.remove(at);
                self.deliver(state, packet);
            }
            Step::Client(index, jump) => self.client_step(state, index, jump)?,
        }
        state.network.sort();
        self.check_exclusive(state)
    }

    fn deliver(&self, state: &mut State, packet: Packet) {
        let Packet {
            client,
            master,
            tag,
            request,
        } = packet;
        let now = state.now;
        let m = &mut state.masters[master as usize];
        if m.lock.is_some_and(|(_, expires)| expires <= now) {
            m.lock = None;
        }
        let reply = match request {
            Request::Lock { token } => {
                let free = m.lock.is_none();
                if free {
                    m.lock = Some((token, now + TTL - MASTER_FAST));
                }
                Reply::Locked(free)
            }
            Request::ReadFloor => Reply::Floor(m.floor),
            Request::SetFloor { generation } => {
                let accepted = !self.protocol.compare_and_set || m.floor < generation;
                if accepted {
                    m.floor = generation;
                }
                Reply::FloorSet(accepted)
            }
        };
        let c = &mut state.clients[client as usize];
        // The answer to an earlier phase or attempt is ignored.
        if c.tag() == tag {
            c.answers.record(reply);
        }
    }

    fn send_all(state: &mut State, index: usize, request: impl Fn(usize) -> Request) {
        let client = &state.clients[index];
        let tag = client.tag();
        for master in 0..MASTERS {
            state.network.push(Packet {
                client: index as u8,
                master: master as u8,
                tag,
                request: request(master),
            });
        }
    }

    /// Forgets `index`'s requests that can no longer matter: floor reads of
    /// a finished phase change nothing, and a late `SET NX` of a finished
    /// phase could only keep a key for a token nobody holds (others wait
    /// longer: liveness, not safety). Late floor writes stay in flight:
    /// they are what the compare-and-set is for.
    fn forget_stale(state: &mut State, index: usize) {
        state.network.retain(|packet| {
            packet.client as usize != index || matches!(packet.request, Request::SetFloor { .. })
        });
    }

    /// Moves to `phase` and sends `request` to every master.
    fn enter(state: &mut State, index: usize, phase: Phase, request: Request) {
        Self::forget_stale(state, index);
        let client = &mut state.clients[index];
        client.phase = phase;
        client.answers = Answers::default();
        Self::send_all(state, index, |_| request);
    }

    /// Gives the attempt up (or ends the hold): compare-and-delete by token
    /// on every master. Applied at once: a release that arrives late only
    /// keeps others out longer (liveness), and every key expires anyway.
    fn finish_attempt(&self, state: &mut State, index: usize) {
        Self::forget_stale(state, index);
        let token = state.clients[index].token(index);
        for master in &mut state.masters {
            if master.lock.is_some_and(|(owner, _)| owner == token) {
                master.lock = None;
            }
        }
        let client = &mut state.clients[index];
        client.phase = Phase::Idle;
        client.answers = Answers::default();
        client.attempts += 1;
        if client.attempts >= self.bounds.attempts {
            client.phase = Phase::Done;
        }
    }

    fn client_step(
        &self,
        state: &mut State,
        index: usize,
        jump: u8,
    ) -> Result<(), (&'static str, String)> {
        let client = state.clients[index];
        match client.phase {
            Phase::Idle => {
                state.clients[index].started = state.now;
                state.clients[index].phase = Phase::Locking;
                if self.protocol.lock {
                    let token = client.token(index);
                    Self::enter(state, index, Phase::Locking, Request::Lock { token });
                } else {
                    state.clients[index].must_exceed = state.highest_granted;
                    Self::enter(state, index, Phase::Reading, Request::ReadFloor);
                }
            }
            Phase::Locking => {
                let ok = client.successes();
                if ok >= MAJORITY && !self.protocol.mint {
                    Self::forget_stale(state, index);
                    state.clients[index].phase = Phase::Granting;
                } else if ok >= MAJORITY && state.now < client.valid_until(self.protocol) {
                    state.clients[index].must_exceed = state.highest_granted;
                    Self::enter(state, index, Phase::Reading, Request::ReadFloor);
                } else {
                    self.finish_attempt(state, index);
                }
            }
            Phase::Reading => {
                let highest = client.answers.highest_floor;
                let generation = highest + 1 + jump;
                state.clients[index].generation = generation;
                Self::enter(
                    state,
                    index,
                    Phase::Setting,
                    Request::SetFloor { generation },
                );
            }
            Phase::Setting => {
                let ok = client.successes();
                if ok < MAJORITY {
                    self.finish_attempt(state, index);
                    return Ok(());
                }
                let generation = client.generation;
                if state.minted & (1 << generation) != 0 {
                    return Err((
                        "unique",
                        format!(
                            "client {index} got a majority for generation {generation}, which another attempt already had"
                        ),
                    ));
                }
                state.minted |= 1 << generation;
                state.clients[index].phase = Phase::Granting;
            }
            Phase::Granting => {
                if self.protocol.lock && state.now >= client.valid_until(self.protocol) {
                    // Too late: the locks may have expired. Not a grant.
                    self.finish_attempt(state, index);
                    return Ok(());
                }
                let generation = client.generation;
                if self.protocol.mint && generation <= client.must_exceed {
                    return Err((
                        "ordered",
                        format!(
                            "client {index} granted generation {generation} after generation {} had been granted",
                            client.must_exceed
                        ),
                    ));
                }
                state.highest_granted = state.highest_granted.max(generation);
                state.clients[index].phase = Phase::Holding;
            }
            Phase::Holding => self.finish_attempt(state, index),
            Phase::Done => unreachable!("a done client has no step"),
        }
        Ok(())
    }

    fn check_exclusive(&self, state: &State) -> Result<(), (&'static str, String)> {
        let valid: Vec<usize> = state
            .clients
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                self.protocol.lock
                    && c.phase == Phase::Holding
                    && state.now < c.valid_until(self.protocol)
            })
            .map(|(index, _)| index)
            .collect();
        if valid.len() > 1 {
            return Err((
                "exclusive",
                format!("clients {valid:?} hold valid grants at tick {}", state.now),
            ));
        }
        Ok(())
    }

    /// Explores every reachable state; the number of states, or the first
    /// violation with the steps that led to it.
    fn run(&self) -> Result<usize, Violation> {
        let initial = self.initial();
        // Visited states are kept as 128-bit fingerprints (hash compaction):
        // a collision, about n^2 / 2^129 for n states, could only hide
        // states, never report a false violation.
        let mut visited: HashSet<u128> = HashSet::new();
        visited.insert(fingerprint(&initial));
        // Depth-first, with the path on the stack for the counterexample.
        let mut stack: Vec<(State, Vec<Step>, Option<Step>)> =
            vec![(initial.clone(), self.steps(&initial), None)];
        while let Some((state, pending, _)) = stack.last_mut() {
            let Some(step) = pending.pop() else {
                stack.pop();
                continue;
            };
            let mut next = state.clone();
            if let Err((property, detail)) = self.apply(&mut next, step) {
                let mut trace: Vec<String> = stack
                    .iter()
                    .filter_map(|(_, _, taken)| taken.map(|s| format!("{s:?}")))
                    .collect();
                trace.push(format!("{step:?}"));
                return Err(Violation {
                    property,
                    detail,
                    trace,
                });
            }
            assert!(
                visited.len() < STATE_LIMIT,
                "more than {STATE_LIMIT} states: shrink the bounds"
            );
            if visited.insert(fingerprint(&next)) {
                let steps = self.steps(&next);
                stack.push((next, steps, Some(step)));
            }
        }
        Ok(visited.len())
    }
}

fn fingerprint(state: &State) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |salt: u64| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut hasher);
        state.hash(&mut hasher);
        hasher.finish()
    };
    (u128::from(half(0x5eed)) << 64) | u128::from(half(0xfe11ce))
}

fn check(protocol: Protocol, bounds: Bounds) -> Result<usize, Violation> {
    Checker { protocol, bounds }.run()
}

/// The generation alone, with no lock at all: any number of attempts
/// minting side by side, paused anywhere, their writes late. The lock
/// only makes this rarer; the properties must not depend on it.
const MINT_ONLY: Protocol = Protocol {
    lock: false,
    ..CORRECT
};

/// The lock alone (Redlock's majority and validity), with time.
const LOCK_ONLY: Protocol = Protocol {
    mint: false,
    ..CORRECT
};

fn passes(protocol: Protocol, bounds: Bounds) {
    match check(protocol, bounds) {
        Ok(states) => {
            println!("{protocol:?} {bounds:?}: {states} states, no violation");
            assert!(states > 1_000, "the search explored only {states} states");
        }
        Err(violation) => panic!("{violation}"),
    }
}

fn fails(protocol: Protocol, bounds: Bounds) -> Violation {
    match check(protocol, bounds) {
        Ok(states) => panic!("{protocol:?} passed the check ({states} states)"),
        Err(violation) => {
            println!("found, as expected:\n{violation}");
            violation
        }
    }
}

#[test]
fn generations_are_unique_and_ordered_for_three_minters() {
    passes(
        MINT_ONLY,
        Bounds {
            clients: 3,
            attempts: 1,
            horizon: 0,
            jumps: true,
        },
    );
}

#[test]
fn generations_are_unique_and_ordered_for_two_minters_twice() {
    passes(
        MINT_ONLY,
        Bounds {
            clients: 2,
            attempts: 2,
            horizon: 0,
            jumps: false,
        },
    );
}

#[test]
fn the_lock_excludes_within_validity_with_pauses_and_expiry() {
    passes(
        LOCK_ONLY,
        Bounds {
            clients: 2,
            attempts: 1,
            horizon: 6,
            jumps: false,
        },
    );
    passes(
        LOCK_ONLY,
        Bounds {
            clients: 3,
            attempts: 1,
            horizon: 2,
            jumps: false,
        },
    );
}

#[test]
fn lock_and_generation_together_keep_every_property() {
    passes(
        CORRECT,
        Bounds {
            clients: 2,
            attempts: 1,
            horizon: 3,
            jumps: false,
        },
    );
}

#[test]
fn the_checker_finds_the_bug_without_the_compare_and_set() {
    let blind = Protocol {
        compare_and_set: false,
        ..MINT_ONLY
    };
    let violation = fails(
        blind,
        Bounds {
            clients: 2,
            attempts: 2,
            horizon: 0,
            jumps: true,
        },
    );
    assert!(
        matches!(violation.property, "unique" | "ordered"),
        "expected a generation violation, got {violation}"
    );
}

#[test]
fn the_checker_finds_the_overlap_without_the_drift_allowance() {
    let no_drift = Protocol {
        drift: 0,
        ..LOCK_ONLY
    };
    let violation = fails(
        no_drift,
        Bounds {
            clients: 2,
            attempts: 1,
            horizon: 6,
            jumps: false,
        },
    );
    assert_eq!(violation.property, "exclusive", "{violation}");
}
