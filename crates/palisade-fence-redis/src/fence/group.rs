//! Group commit: up to `calls_in_flight` calls are in flight on a fence
//! ([`crate::FenceOptions`], default 2; more than one keeps the pipeline
//! full while the client handles an answer and the callers it wakes queue
//! again); the
//! fenced requests that queue while they are go to Redis together, as one
//! `FCALL` (one per hash slot on a cluster), when one of them finishes. The function judges and applies each request on its
//! own, in arrival order, and answers each its own result, so a request's
//! guarantees are those of a call of its own; only Redis's per-call cost
//! (the round trip, the Lua call's setup) is shared.

use std::collections::BTreeMap;
use std::mem;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use redis::Value;
use tokio::sync::oneshot;

use super::{Answered, RedisFence, packed, parse_answer};
use crate::RedisFenceError;
use crate::install::MODULE_COMMAND;
use crate::keys::LockKeys;
use crate::ops::{CallKeys, PackedRequest, Token};

/// The version of the argument layout `palisade_fence_apply` takes.
pub(super) const PROTOCOL: &str = "2";

/// The module's layout: the function's requests packed one per argument,
/// all answers in one string (`palisade-fence-redis-module`,
/// `request.rs`; [`super::packed`]).
const MODULE_PROTOCOL: &str = "4";

/// The most arguments one grouped call carries (a request that is larger
/// on its own still goes, alone): a bound on how long one call holds
/// Redis's thread.
const GROUP_ARGS: usize = 4096;

/// One request, encoded: its lock's keys, its `KEYS` (the marks record
/// first), its fields (key indexes counted from its first key), how many
/// fields and how many ops they hold.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) keys: std::sync::Arc<LockKeys>,
    pub(super) call_keys: CallKeys,
    pub(super) fields: Fields,
    pub(super) size: usize,
    pub(super) ops: usize,
}

/// A request's fields as its call sends them: packed by the caller for
/// the module (so the sender only copies them), one argument each for the
/// function.
#[derive(Debug)]
pub(super) enum Fields {
    Packed(PackedRequest),
    Arguments(Vec<Token>),
}

/// A request waiting for the call in flight to finish.
struct Waiting {
    request: Prepared,
    answer: oneshot::Sender<Answered>,
}

/// Where a request goes: behind the call in flight, or out now.
enum Place {
    Queued(oneshot::Receiver<Answered>),
    Turn(Prepared),
}

/// The queue, and how many calls are in flight.
#[derive(Default)]
pub(super) struct Queue {
    state: std::sync::Mutex<State>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queue")
    }
}

#[derive(Default)]
struct State {
    in_flight: usize,
    waiting: Vec<Waiting>,
}

/// The right to send: whoever holds it is a call in flight. Dropped
/// (answered, failed or cancelled), it hands what queued meanwhile to a
/// new task, which sends it and then whatever queued behind it, group
/// after group, until the queue is empty.
struct Turn {
    fence: RedisFence,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = self.fence.queue_state();
        if state.waiting.is_empty() {
            state.in_flight -= 1;
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to send from (it is shutting down): the waiting
            // requests are dropped unsent and their callers told so.
            state.waiting.clear();
            state.in_flight -= 1;
            return;
        };
        let mut group = take_group(&mut state.waiting);
        drop(state);
        let fence = self.fence.clone();
        runtime.spawn(async move {
            // Cancelled (the runtime shutting down), this turn hands on.
            let _turn = Turn {
                fence: fence.clone(),
            };
            loop {
                fence.send_group(group).await;
                let mut state = fence.queue_state();
                if state.waiting.is_empty() {
                    return;
                }
                group = take_group(&mut state.waiting);
            }
        });
    }
}

/// The oldest waiting requests, up to the group bound (at least one).
fn take_group(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
    let mut size = 0;
    let mut count = 0;
    for item in waiting.iter() {
        size += item.request.size + 3;
        if count > 0 && size > GROUP_ARGS {
            break;
        }
        count += 1;
    }
    let rest = waiting.split_off(count);
    mem::replace(waiting, rest)
}

impl RedisFence {
    fn queue_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .queue
            .state
            .lock()
            .expect("the request queue is never poisoned")
    }

    /// Sends `request` now if fewer than `calls_in_flight` calls are in
    /// flight; else queues it for the next grouped call. The request's own
    /// answer.
    pub(super) async fn submit(&self, request: Prepared) -> Answered {
        let receiver = match self.queue_or_take_turn(request) {
            Place::Queued(receiver) => receiver,
            Place::Turn(request) => {
                let turn = Turn {
                    fence: self.clone(),
                };
                let answer = self.send_call(std::slice::from_ref(&request)).await;
                drop(turn);
                return answer.and_then(|mut answers| answers.pop().ok_or_else(short_answer)?);
            }
        };
        receiver.await.unwrap_or_else(|_| {
            Err(RedisFenceError::Redis {
                operation: "fcall",
                message: "the runtime shut down before the request was sent".into(),
                may_have_applied: false,
            })
        })
    }

    /// Queues `request` behind the calls in flight, or takes a turn to
    /// send it now.
    fn queue_or_take_turn(&self, request: Prepared) -> Place {
        let mut state = self.queue_state();
        if state.in_flight < self.inner.options.calls_in_flight {
            state.in_flight += 1;
            return Place::Turn(request);
        }
        let (answer, receiver) = oneshot::channel();
        state.waiting.push(Waiting { request, answer });
        Place::Queued(receiver)
    }

    /// Sends a group (one call per hash slot on a cluster, concurrently)
    /// and hands each request its answer.
    async fn send_group(&self, group: Vec<Waiting>) {
        if !self.inner.connection.is_cluster() {
            return self.send_part(group).await;
        }
        let mut by_slot: BTreeMap<u16, Vec<Waiting>> = BTreeMap::new();
        for waiting in group {
            by_slot
                .entry(waiting.request.keys.slot())
                .or_default()
                .push(waiting);
        }
        futures::future::join_all(by_slot.into_values().map(|part| self.send_part(part))).await;
    }

    /// Sends one call carrying `part` (one slot's requests).
    async fn send_part(&self, part: Vec<Waiting>) {
        let (requests, answers): (Vec<Prepared>, Vec<_>) = part
            .into_iter()
            .map(|waiting| (waiting.request, waiting.answer))
            .unzip();
        match self.send_call(&requests).await {
            Ok(values) => {
                for (value, answer) in values.into_iter().zip(answers) {
                    // A caller that stopped waiting no longer wants it.
                    let _ = answer.send(value);
                }
            }
            Err(error) => {
                for (request, answer) in requests.iter().zip(answers) {
                    let _ = answer.send(Err(error.for_lock(request.keys.lock())));
                }
            }
        }
    }

    /// One `FCALL palisade_fence_apply` (or the module's `PALISADE.FENCE`,
    /// its requests packed) carrying `requests` (all in one hash slot on
    /// a cluster): one answer per request, in order.
    async fn send_call(&self, requests: &[Prepared]) -> Result<Vec<Answered>, RedisFenceError> {
        let first = &requests[0];
        let key_count: usize = requests.iter().map(|request| request.call_keys.len()).sum();
        let module = self.inner.module;
        // Room for every argument: none of them grows the buffer.
        let bytes: usize = requests
            .iter()
            .map(|request| {
                let keys: usize = request.call_keys.iter().map(Bytes::len).sum();
                keys + match &request.fields {
                    Fields::Packed(packed) => packed.len() + 8,
                    Fields::Arguments(_) => 24 * request.size,
                }
            })
            .sum();
        let mut command = redis::Cmd::with_capacity(4 + key_count + 3 * requests.len(), 64 + bytes);
        if module {
            command.arg(MODULE_COMMAND);
        } else {
            command.arg("FCALL").arg("palisade_fence_apply");
        }
        command.arg(key_count);
        for request in requests {
            for key in &request.call_keys {
                command.arg(key.as_ref());
            }
        }
        command
            .arg(if module { MODULE_PROTOCOL } else { PROTOCOL })
            .arg(requests.len());
        let mut base = 0;
        for request in requests {
            match &request.fields {
                Fields::Packed(packed) => {
                    command.arg(base).arg(&packed[..]);
                }
                Fields::Arguments(tokens) => {
                    // The header (5 fields), the op count, the ops.
                    let (header, ops) = tokens.split_at(5.min(tokens.len()));
                    command.arg(tokens.len() + 1).arg(base);
                    for token in header {
                        command.arg(token.argument().as_ref());
                    }
                    command.arg(request.ops);
                    for token in ops {
                        command.arg(token.argument().as_ref());
                    }
                }
            }
            base += request.call_keys.len();
        }
        self.inner.counters.calls.fetch_add(1, Ordering::Relaxed);
        if requests.len() > 1 {
            tracing::trace!(target: crate::TRACE_TARGET, requests = requests.len(), "grouped call");
        }
        let value = self.send(&first.keys, command, true).await?;
        if module {
            return packed::answers(&value, requests.len());
        }
        match value {
            Value::Array(answers) if answers.len() == requests.len() => {
                Ok(answers.iter().map(parse_answer).collect())
            }
            other => Err(RedisFenceError::Protocol(format!(
                "palisade_fence_apply answered {other:?} to {} requests",
                requests.len()
            ))),
        }
    }
}

fn short_answer() -> RedisFenceError {
    RedisFenceError::Protocol("palisade_fence_apply answered no request".into())
}
