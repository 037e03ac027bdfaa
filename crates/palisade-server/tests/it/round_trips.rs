//! How many engine calls a request costs, counted by an engine that
//! forwards to sled and counts: a capped write is one (the cap is checked
//! in the write's own step), where reading the marks first made it two.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, StatusCode};
use palisade_core::{LockName, Mode, Sequencer};
use palisade_server::AppState;
use palisade_store::{
    Applied, Durability, Engine, EngineFuture, EngineInfo, Limits, Marks, Read, ReadRequest,
    Refused, Store, StoreConfig, StoredRecord, WriteRequest, open_sled_engine,
};

use crate::common::Server;

/// Forwards to `inner`, noting each call's name.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Engine>,
    calls: Arc<Mutex<Vec<&'static str>>>,
}

impl Counting {
    fn note(&self, call: &'static str) {
        self.calls.lock().unwrap().push(call);
    }
}

impl Engine for Counting {
    fn info(&self) -> EngineInfo {
        self.inner.info()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    fn durability(&self) -> Durability {
        self.inner.durability()
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        self.note("write");
        self.inner.write(request)
    }

    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        self.note("read");
        self.inner.read(request)
    }

    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        self.note("admit");
        self.inner.admit(sequencer)
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        self.note("marks");
        self.inner.marks(lock)
    }

    fn health(&self) -> EngineFuture<()> {
        self.inner.health()
    }

    fn close(&self) -> EngineFuture<()> {
        self.inner.close()
    }

    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        self.inner.dump()
    }
}

fn exclusive(generation: u64) -> String {
    Sequencer::new(
        LockName::new("L").unwrap(),
        Mode::Exclusive,
        palisade_core::Generation::new(generation).unwrap(),
    )
    .to_string()
}

#[tokio::test]
async fn a_capped_write_costs_one_engine_call_whether_accepted_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let engine = Counting {
        inner: open_sled_engine(dir.path(), &StoreConfig::default()).unwrap(),
        calls: Arc::clone(&calls),
    };
    let store = Store::with_engine(Arc::new(engine), StoreConfig::default());
    let server = Server::over(dir, AppState::new(store).with_max_mark_raise(Some(100)));
    let put = |generation: u64, value: &'static str| {
        let sequencer = exclusive(generation);
        let server = &server;
        async move {
            server
                .send(
                    Method::PUT,
                    "/v1/locks/L/keys/k",
                    &[(Sequencer::HTTP_HEADER, &sequencer)],
                    Body::from(value),
                )
                .await
        }
    };
    let taken = || std::mem::take(&mut *calls.lock().unwrap());

    assert_eq!(put(1_000, "first").await.status, StatusCode::OK);
    assert_eq!(taken(), ["write"], "a first write");
    assert_eq!(put(1_100, "at the cap").await.status, StatusCode::OK);
    assert_eq!(taken(), ["write"], "a write at the cap");
    let before = server.state.store().dump().await.unwrap();
    let body = put(1_201, "over")
        .await
        .assert_error(StatusCode::CONFLICT, "raise_too_large");
    assert_eq!(body["allowed_up_to"], 1_200);
    assert_eq!(taken(), ["write"], "a write over the cap");
    assert_eq!(
        server.state.store().dump().await.unwrap(),
        before,
        "the refusal changed nothing"
    );

    // A fenced read still reads the marks first (the cap is not passed
    // into an engine's read).
    let reader = Sequencer::new(
        LockName::new("L").unwrap(),
        Mode::Shared,
        palisade_core::Generation::new(1_150).unwrap(),
    )
    .to_string();
    let read = server
        .send(
            Method::GET,
            "/v1/locks/L/keys/k",
            &[(Sequencer::HTTP_HEADER, &reader)],
            Body::empty(),
        )
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(taken(), ["marks", "read"], "a capped fenced read");
}
