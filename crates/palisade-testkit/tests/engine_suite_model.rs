//! The engine suite checked against itself: an in-memory model engine passes
//! every case, and model engines each broken in one way are caught by the
//! case meant to catch that flaw.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use palisade_core::{LockName, Sequencer};
use palisade_store::{
    Applied, Engine, EngineFuture, EngineInfo, Marks, Op, OpResult, Read, ReadRequest, Refused,
    RequestId, StoredRecord, WriteRequest,
};
use palisade_testkit::engine_suite::{self, EngineFactory, EngineOptions};

/// One way a model engine can be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// Accepts every generation.
    NoFence,
    /// Keeps the ops before a failed CAS.
    PartialBatch,
    /// Ignores request ids.
    NoReplay,
    /// Forgets everything on a reopen.
    Amnesia,
    /// Numbers commits per lock instead of across the engine.
    PerLockSeq,
    /// Creates a lock's state even for a refused request (a trace only a
    /// full dump shows).
    RefusalTrace,
    /// Ignores a write's raise cap.
    NoRaiseCap,
}

#[derive(Debug, Default)]
struct LockState {
    marks: Marks,
    data: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Request id → (fingerprint, outcome), oldest first.
    ids: VecDeque<(RequestId, Vec<u8>, Applied)>,
    seq: u64,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockName, LockState>,
    seq: u64,
}

#[derive(Debug)]
struct ModelEngine {
    state: Arc<Mutex<State>>,
    window: usize,
    flaw: Flaw,
}

fn ready<T: Send + 'static>(value: T) -> EngineFuture<T> {
    Box::pin(async move { Ok(value) })
}

impl ModelEngine {
    fn admit_in(&self, lock: &mut LockState, sequencer: &Sequencer) -> Result<Marks, Refused> {
        let admitted = match self.flaw {
            Flaw::NoFence => Some(
                lock.marks
                    .admit(sequencer.mode(), sequencer.generation())
                    .unwrap_or(lock.marks),
            ),
            _ => lock.marks.admit(sequencer.mode(), sequencer.generation()),
        };
        admitted.ok_or_else(|| Refused::Stale {
            lock: sequencer.lock().clone(),
            mode: sequencer.mode(),
            presented: sequencer.generation(),
            marks: lock.marks,
            regression: false,
        })
    }

    fn write_now(&self, request: WriteRequest) -> Result<Applied, Refused> {
        let lock = request.sequencer.lock().clone();
        let outcome = self.write_inner(request);
        if self.flaw == Flaw::RefusalTrace && outcome.is_err() {
            let trace = LockName::new(format!("{lock}/trace")).unwrap();
            self.state
                .lock()
                .unwrap()
                .locks
                .entry(trace)
                .or_default()
                .seq += 1;
        }
        outcome
    }

    fn write_inner(&self, request: WriteRequest) -> Result<Applied, Refused> {
        let mut state = self.state.lock().unwrap();
        let state = &mut *state;
        // Looked up, not created: a refusal leaves no trace of the lock.
        let seen = state.locks.get(request.sequencer.lock());
        if let (Some(id), Some(lock)) = (
            request
                .request_id
                .as_ref()
                .filter(|_| self.flaw != Flaw::NoReplay),
            seen,
        ) {
            if let Some((_, fingerprint, outcome)) = lock.ids.iter().find(|(known, ..)| known == id)
            {
                if *fingerprint != request.fingerprint {
                    return Err(Refused::IdempotencyKeyReused {
                        request_id: id.clone(),
                    });
                }
                return Ok(Applied {
                    replayed: true,
                    ..outcome.clone()
                });
            }
        }
        if let Some(limit) = request
            .raise_limit
            .filter(|_| self.flaw != Flaw::NoRaiseCap)
        {
            limit.check(
                &request.sequencer,
                seen.map(|lock| lock.marks).unwrap_or_default(),
            )?;
        }
        let lock = state
            .locks
            .entry(request.sequencer.lock().clone())
            .or_default();
        let marks = self.admit_in(lock, &request.sequencer)?;
        let mut data = lock.data.clone();
        let mut results = Vec::new();
        for (index, op) in request.ops.iter().enumerate() {
            let key = op.key().to_vec();
            let current = data.get(&key).cloned();
            let result = match op {
                Op::Put { value, .. } => {
                    data.insert(key, value.to_vec());
                    if current.is_some() {
                        OpResult::Replaced
                    } else {
                        OpResult::Created
                    }
                }
                Op::Delete { .. } => match data.remove(&key) {
                    Some(_) => OpResult::Deleted,
                    None => OpResult::Absent,
                },
                Op::Cas { expected, new, .. } => {
                    if current.as_deref() != expected.as_deref() {
                        if self.flaw == Flaw::PartialBatch {
                            lock.data = data;
                        }
                        return Err(Refused::CasMismatch {
                            op_index: index,
                            current: current.map(Into::into),
                        });
                    }
                    match new {
                        Some(value) => data.insert(key, value.to_vec()),
                        None => data.remove(&key),
                    };
                    OpResult::Swapped
                }
            };
            results.push(result);
        }
        lock.data = data;
        lock.marks = marks;
        lock.seq += 1;
        state.seq += 1;
        let applied = Applied {
            results,
            marks,
            commit_seq: if self.flaw == Flaw::PerLockSeq {
                lock.seq
            } else {
                state.seq
            },
            replayed: false,
        };
        if let Some(id) = request.request_id {
            lock.ids
                .push_back((id, request.fingerprint, applied.clone()));
            while lock.ids.len() > self.window {
                lock.ids.pop_front();
            }
        }
        Ok(applied)
    }
}

impl Engine for ModelEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: "model",
            durability: "in memory".to_owned(),
            location: "this process".to_owned(),
        }
    }

    fn write(&self, request: WriteRequest) -> EngineFuture<Result<Applied, Refused>> {
        ready(self.write_now(request))
    }

    fn read(&self, request: ReadRequest<'_>) -> EngineFuture<Result<Read, Refused>> {
        let (lock, key, sequencer) = (request.lock, request.key, request.sequencer);
        let mut state = self.state.lock().unwrap();
        let Some(sequencer) = sequencer else {
            let lock = state.locks.get(lock);
            return ready(Ok(Read {
                value: lock.and_then(|l| l.data.get(key)).cloned().map(Into::into),
                marks: lock.map(|l| l.marks).unwrap_or_default(),
            }));
        };
        let lock = state.locks.entry(lock.clone()).or_default();
        let outcome = self.admit_in(lock, sequencer).map(|marks| {
            lock.marks = marks;
            Read {
                value: lock.data.get(key).cloned().map(Into::into),
                marks,
            }
        });
        ready(outcome)
    }

    fn admit(&self, sequencer: &Sequencer) -> EngineFuture<Result<Marks, Refused>> {
        let mut state = self.state.lock().unwrap();
        let lock = state.locks.entry(sequencer.lock().clone()).or_default();
        let outcome = self.admit_in(lock, sequencer).inspect(|marks| {
            lock.marks = *marks;
        });
        ready(outcome)
    }

    fn marks(&self, lock: &LockName) -> EngineFuture<Marks> {
        let state = self.state.lock().unwrap();
        ready(state.locks.get(lock).map(|l| l.marks).unwrap_or_default())
    }

    fn health(&self) -> EngineFuture<()> {
        ready(())
    }

    fn close(&self) -> EngineFuture<()> {
        ready(())
    }

    fn dump(&self) -> EngineFuture<Vec<StoredRecord>> {
        let state = self.state.lock().unwrap();
        let mut records = Vec::new();
        for (name, lock) in &state.locks {
            let place = |what: &str| format!("{what}/{name}");
            records.push(StoredRecord {
                place: place("marks"),
                key: Vec::new(),
                value: format!("{} {}", lock.marks, lock.seq).into_bytes(),
            });
            for (key, value) in &lock.data {
                records.push(StoredRecord {
                    place: place("data"),
                    key: key.clone(),
                    value: value.clone(),
                });
            }
            for (id, fingerprint, applied) in &lock.ids {
                records.push(StoredRecord {
                    place: place("ids"),
                    key: id.as_str().as_bytes().to_vec(),
                    value: format!("{fingerprint:?} {applied:?}").into_bytes(),
                });
            }
        }
        records.sort();
        ready(records)
    }
}

struct ModelFactory(Flaw);

impl EngineFactory for ModelFactory {
    type Storage = (Arc<Mutex<State>>, usize);

    fn name(&self) -> &'static str {
        "model"
    }

    async fn open(&self, options: EngineOptions) -> (Arc<dyn Engine>, Self::Storage) {
        let state = Arc::new(Mutex::new(State::default()));
        let window = options.idempotency_window as usize;
        let engine = ModelEngine {
            state: Arc::clone(&state),
            window,
            flaw: self.0,
        };
        (Arc::new(engine), (state, window))
    }

    async fn reopen(
        &self,
        engine: Arc<dyn Engine>,
        storage: &mut Self::Storage,
    ) -> Arc<dyn Engine> {
        drop(engine);
        if self.0 == Flaw::Amnesia {
            *storage.0.lock().unwrap() = State::default();
        }
        Arc::new(ModelEngine {
            state: Arc::clone(&storage.0),
            window: storage.1,
            flaw: self.0,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_model_passes_every_case() {
    engine_suite::test_all(ModelFactory(Flaw::None)).await;
}

/// Runs one case against a flawed model; it must fail with the suite's
/// message.
async fn caught<Fut>(case: impl FnOnce(&'static ModelFactory) -> Fut, flaw: Flaw)
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let factory: &'static ModelFactory = Box::leak(Box::new(ModelFactory(flaw)));
    let outcome = tokio::spawn(case(factory)).await;
    let Err(error) = outcome else {
        panic!("a model with flaw {flaw:?} passed the case meant to catch it");
    };
    let message = error.into_panic();
    let message = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(message.starts_with("engine suite [model]"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flawed_models_are_caught() {
    caught(engine_suite::rule_table, Flaw::NoFence).await;
    caught(engine_suite::refusal_changes_nothing, Flaw::NoFence).await;
    caught(engine_suite::concurrent_writers, Flaw::NoFence).await;
    caught(engine_suite::batches_are_all_or_nothing, Flaw::PartialBatch).await;
    caught(engine_suite::idempotent_replay, Flaw::NoReplay).await;
    caught(engine_suite::concurrent_retries_apply_once, Flaw::NoReplay).await;
    caught(engine_suite::durable_across_reopen, Flaw::Amnesia).await;
    caught(engine_suite::commit_seq_increases, Flaw::PerLockSeq).await;
    caught(engine_suite::refusal_changes_nothing, Flaw::RefusalTrace).await;
    caught(engine_suite::raise_cap, Flaw::NoRaiseCap).await;
    caught(engine_suite::raise_cap, Flaw::NoReplay).await;
}
