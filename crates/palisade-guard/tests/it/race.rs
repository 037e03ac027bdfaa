//! The check-then-act race: a mark check alone lets an older generation
//! write after a newer one; the guard's serialisation does not.
//!
//! The handlers record the order they ran in and wait inside (a yield, a
//! sleep, or a signal from the test) to widen the window between the
//! check and the write.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use common::*;
use palisade_core::{Mode, Sequencer};
use palisade_guard::{Admission, Fenced, Guard, MarkStore, MemoryMarks};
use tokio::sync::Notify;
use tower::ServiceExt as _;

/// Generous bound for anything that should happen at once.
const BOUND: Duration = Duration::from_secs(30);

/// The order handlers ran in, and a generation that must wait for the test
/// to let it go on.
#[derive(Clone, Default)]
struct Recorder {
    order: Arc<Mutex<Vec<u64>>>,
    parked_generation: Option<u64>,
    parked_entered: Arc<Notify>,
    release_parked: Arc<Notify>,
}

impl Recorder {
    fn parking(generation: u64) -> Self {
        Recorder {
            parked_generation: Some(generation),
            ..Recorder::default()
        }
    }

    fn order(&self) -> Vec<u64> {
        self.order.lock().unwrap().clone()
    }
}

/// The handler: the parked generation announces itself and waits for the
/// test; every other one writes at once. "Writing" is appending to
/// `order`.
async fn write_recorded(State(recorder): State<Recorder>, request: Request) -> StatusCode {
    let generation = request_generation(&request);
    if Some(generation) == recorder.parked_generation {
        recorder.parked_entered.notify_one();
        recorder.release_parked.notified().await;
    }
    recorder.order.lock().unwrap().push(generation);
    StatusCode::OK
}

fn request_generation(request: &Request) -> u64 {
    let text = request.headers()[Sequencer::HTTP_HEADER].to_str().unwrap();
    text.parse::<Sequencer>().unwrap().generation().get()
}

/// What a service that only checks the mark would do: admit, then call
/// the handler, with nothing held in between.
async fn check_only(State(marks): State<MemoryMarks>, request: Request, next: Next) -> Response {
    let sequencer: Sequencer = request.headers()[Sequencer::HTTP_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    match marks.admit(&sequencer).await.unwrap() {
        Admission::Admitted { .. } => next.run(request).await,
        Admission::Stale { .. } => StatusCode::CONFLICT.into_response(),
    }
}

fn put_generation(generation: u64) -> axum::http::Request<Body> {
    put_item(&exclusive(generation))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mark_check_alone_lets_generation_4_write_after_generation_5() {
    let recorder = Recorder::parking(4);
    let app = Router::new()
        .route("/v1/{lock}/items/{key}", put(write_recorded))
        .route_layer(middleware::from_fn_with_state(
            MemoryMarks::new(),
            check_only,
        ))
        .with_state(recorder.clone());

    // Generation 4 passes the check and stalls before its write.
    let older = tokio::spawn(app.clone().oneshot(put_generation(4)));
    tokio::time::timeout(BOUND, recorder.parked_entered.notified())
        .await
        .expect("generation 4 reaches its handler");
    // Generation 5 passes the check and writes.
    let newer = tokio::time::timeout(BOUND, app.clone().oneshot(put_generation(5)))
        .await
        .expect("nothing holds generation 5 back")
        .unwrap();
    assert_eq!(newer.status(), StatusCode::OK);
    // Generation 4 wakes up and writes too: the hazard.
    recorder.release_parked.notify_one();
    let older = tokio::time::timeout(BOUND, older)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(older.status(), StatusCode::OK);
    assert_eq!(recorder.order(), [5, 4], "the older generation wrote last");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_guard_makes_generation_5_wait_until_generation_4_is_done() {
    let recorder = Recorder::parking(4);
    let guard = Guard::builder(MemoryMarks::new()).build();
    let app = Router::new()
        .route("/v1/{lock}/items/{key}", put(write_recorded))
        .route_layer(guard.layer())
        .with_state(recorder.clone());

    let older = tokio::spawn(app.clone().oneshot(put_generation(4)));
    tokio::time::timeout(BOUND, recorder.parked_entered.notified())
        .await
        .expect("generation 4 reaches its handler");
    let newer = tokio::spawn(app.clone().oneshot(put_generation(5)));
    // Generation 5 is queued behind generation 4's handler, not running.
    tokio::time::timeout(BOUND, async {
        while guard.waiting(&lock()) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("generation 5 queues on the lock");
    assert!(recorder.order().is_empty());

    recorder.release_parked.notify_one();
    let older = tokio::time::timeout(BOUND, older)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let newer = tokio::time::timeout(BOUND, newer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (older.status(), newer.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    assert_eq!(recorder.order(), [4, 5]);
    assert_eq!(guard.metrics().waited, 1);
    assert_eq!(guard.locks_in_flight(), 0);
}

/// One handler run: its mode and generation, and whether this is its
/// start or its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    mode: Mode,
    generation: u64,
    start: bool,
}

#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<Event>>>);

impl Journal {
    fn push(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

/// Records its start, waits (yields, then a short sleep on every third
/// generation) to widen the window, records its end.
async fn journaled(State(journal): State<Journal>, fenced: Fenced) -> StatusCode {
    let event = |start| Event {
        mode: fenced.mode(),
        generation: fenced.generation().get(),
        start,
    };
    journal.push(event(true));
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    if fenced.generation().get() % 3 == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    journal.push(event(false));
    StatusCode::OK
}

fn journaled_app(guard: &Guard, journal: &Journal) -> Router {
    Router::new()
        .route("/v1/{lock}/items/{key}", put(journaled).get(journaled))
        .route_layer(guard.layer())
        .with_state(journal.clone())
}

/// Sends every request at once and returns (sequencer, status) pairs.
async fn send_all(
    app: &Router,
    requests: Vec<(Sequencer, axum::http::Request<Body>)>,
) -> Vec<(Sequencer, StatusCode)> {
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|(sequencer, request)| {
            let app = app.clone();
            tokio::spawn(async move { (sequencer, app.oneshot(request).await.unwrap().status()) })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(tokio::time::timeout(BOUND, task).await.unwrap().unwrap());
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_writers_never_run_out_of_generation_order() {
    let journal = Journal::default();
    let guard = Guard::builder(MemoryMarks::new()).build();
    let app = journaled_app(&guard, &journal);

    // 300 writes with interleaved generations 1..=60, five of each.
    let requests = (0..300u64)
        .map(|i| {
            let sequencer = exclusive((i * 37) % 60 + 1);
            let request = put_item(&sequencer);
            (sequencer, request)
        })
        .collect();
    let outcomes = send_all(&app, requests).await;

    let events = journal.events();
    // No overlap: every start is immediately followed by its own end.
    for pair in events.chunks(2) {
        assert!(
            pair[0].start && !pair[1].start && pair[0].generation == pair[1].generation,
            "{pair:?}"
        );
    }
    // The handler never ran for g after it ran for g' > g.
    let order: Vec<u64> = events
        .iter()
        .filter(|e| e.start)
        .map(|e| e.generation)
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {order:?}"
    );
    // Every 200 ran its handler once; every other answer was a 409.
    let admitted = outcomes
        .iter()
        .filter(|(_, status)| *status == StatusCode::OK)
        .count();
    assert_eq!(admitted, order.len());
    assert!(
        outcomes
            .iter()
            .all(|(_, status)| *status == StatusCode::OK || *status == StatusCode::CONFLICT)
    );
    assert!(admitted >= 1);
    let metrics = guard.metrics();
    assert_eq!(metrics.admitted as usize, admitted);
    assert_eq!(metrics.refused("stale") as usize, 300 - admitted);
    assert_eq!(
        guard.locks_in_flight(),
        0,
        "no per-lock lock outlives its requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_and_writers_follow_the_fencing_rules() {
    let journal = Journal::default();
    let guard = Guard::builder(MemoryMarks::new()).build();
    let app = journaled_app(&guard, &journal);

    // 300 requests, a third of them shared reads, generations interleaved.
    let requests = (0..300u64)
        .map(|i| {
            let generation = (i * 53) % 70 + 1;
            let sequencer = if i % 3 == 0 {
                shared(generation)
            } else {
                exclusive(generation)
            };
            let request = if sequencer.mode() == Mode::Shared {
                get_item(Some(&sequencer))
            } else {
                put_item(&sequencer)
            };
            (sequencer, request)
        })
        .collect();
    let outcomes = send_all(&app, requests).await;
    let events = journal.events();

    // A writer runs alone: its start is immediately followed by its end.
    for (index, event) in events.iter().enumerate() {
        if event.mode == Mode::Exclusive && event.start {
            assert_eq!(
                events[index + 1],
                Event {
                    start: false,
                    ..*event
                },
                "a writer overlapped: {events:?}"
            );
        }
    }
    // The rules, in the order the handlers started: a writer never starts
    // after any request with a higher generation; a reader never starts
    // after a writer with a higher generation.
    let starts: Vec<&Event> = events.iter().filter(|e| e.start).collect();
    for (index, event) in starts.iter().enumerate() {
        for earlier in &starts[..index] {
            match event.mode {
                Mode::Exclusive => assert!(
                    earlier.generation <= event.generation,
                    "{earlier:?} before {event:?}"
                ),
                Mode::Shared => assert!(
                    earlier.mode == Mode::Shared || earlier.generation <= event.generation,
                    "{earlier:?} before {event:?}"
                ),
            }
        }
    }
    let admitted = outcomes
        .iter()
        .filter(|(_, status)| *status == StatusCode::OK)
        .count();
    assert_eq!(admitted, starts.len());
    assert!(
        starts.iter().any(|e| e.mode == Mode::Shared)
            && starts.iter().any(|e| e.mode == Mode::Exclusive)
    );
    assert_eq!(guard.locks_in_flight(), 0);
}
