//! [`FencedLog`]: numbered, write-once log objects (`If-None-Match: *`)
//! that carry the lock's marks from entry to entry, so that a fence taking
//! the next slot refuses every older holder, wherever it was paused.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::TryStreamExt as _;
use object_store::ObjectStoreExt as _;
use object_store::PutMode;
use object_store::PutPayload;
use object_store::path::Path;
use palisade_core::marks::Marks;
use palisade_core::{Mode, Refused, Sequencer, SequencerSource};

use crate::fence::{FenceStats, Head};
use crate::outcome::{Budget, Outcome, conditional_put, store_error};
use crate::record::{self, meta};
use crate::{FenceError, ObjectFence};

/// Slot numbers are written with this many digits, so names sort as
/// numbers.
const SLOT_DIGITS: usize = 20;

/// A log of numbered objects under one prefix, fenced by one lock.
///
/// Entry `n` is the object `<prefix>/<n, 20 digits>`, written once with
/// `If-None-Match: *`, its metadata carrying the writer's generation and
/// the lock's marks after it (the previous entry's marks, admitted by
/// [`Marks::admit`]). A writer appends at the slot after the last entry it
/// knows; if another writer took that slot first (a 412), it reads that
/// entry's marks and decides again. So every entry was admitted against
/// the marks of the entry just before it: the log is the lock's history,
/// in order, with no gap.
///
/// A new holder calls [`FencedLog::fence`] on acquire: it writes a fence
/// entry (no bytes) at the next slot with the raised marks. Every older
/// holder's append, even one already past its own check (paused, or its
/// request delayed in the network), targets a slot that is now taken, and
/// is refused on reading it. This is the resource server's guarantee, per
/// log.
///
/// Entries are never deleted by the fence: a deleted slot could be written
/// again by an older holder whose append targets it.
#[derive(Debug)]
pub struct FencedLog {
    fence: Arc<ObjectFence>,
    prefix: Path,
    /// The last entry this log handle wrote or read: where the next append
    /// goes. A stale memory costs a 412 and a read, never safety: the slot's
    /// condition decides.
    tail: Mutex<Option<Tail>>,
}

#[derive(Debug, Clone)]
struct Tail {
    slot: u64,
    marks: Marks,
    /// The lock of the log's entries (`None`: empty log).
    lock: Option<String>,
}

/// An entry appended (or, for a fence that raised nothing, the last one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Its slot: the log's commit order.
    pub slot: u64,
    /// The lock's marks after it.
    pub marks: Marks,
}

/// One entry as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its slot.
    pub slot: u64,
    /// The generation that wrote it.
    pub generation: u64,
    /// The lock's marks after it.
    pub marks: Marks,
    /// A fence entry (written by [`FencedLog::fence`]; no bytes).
    pub fence: bool,
    /// Its bytes.
    pub bytes: Bytes,
}

impl FencedLog {
    pub(crate) fn new(fence: Arc<ObjectFence>, prefix: Path) -> Result<Self, FenceError> {
        record::check_user_path(&prefix)?;
        Ok(FencedLog {
            fence,
            prefix,
            tail: Mutex::new(None),
        })
    }

    /// The object of entry `slot`.
    pub fn slot_path(&self, slot: u64) -> Path {
        self.prefix
            .clone()
            .join(format!("{slot:0width$}", width = SLOT_DIGITS))
    }

    /// Appends `bytes` under the exclusive sequencer: the entry lands at
    /// the next free slot if no newer generation has fenced or appended
    /// before it; otherwise [`Refused::Stale`].
    pub async fn append(
        &self,
        source: &impl SequencerSource,
        bytes: impl Into<Bytes>,
    ) -> Result<Result<Appended, Refused>, FenceError> {
        self.write(source, Some(bytes.into())).await
    }

    /// Fences the log for the sequencer's generation: a fence entry at the
    /// next slot with the raised marks. Nothing is written when the last
    /// entry's marks already admit the sequencer unchanged (the same
    /// holder fencing again).
    pub async fn fence(
        &self,
        source: &impl SequencerSource,
    ) -> Result<Result<Appended, Refused>, FenceError> {
        self.write(source, None).await
    }

    /// Reads entry `slot` (`None`: not written).
    pub async fn read(&self, slot: u64) -> Result<Option<LogEntry>, FenceError> {
        let path = self.slot_path(slot);
        let result = match self.fence.store.get(&path).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(store_error(&self.fence.name, error)),
        };
        let head = Head::from_attributes(&result.attributes, result.meta.e_tag.clone());
        let (generation, marks) = entry_fields(&path, &head)?;
        let fence = record::metadata(&result.attributes, meta::DELETED) == Some("1");
        let bytes = result
            .bytes()
            .await
            .map_err(|error| store_error(&self.fence.name, error))?;
        Ok(Some(LogEntry {
            slot,
            generation,
            marks,
            fence,
            bytes,
        }))
    }

    /// The last slot written (0: empty), read from the store.
    pub async fn last_slot(&self) -> Result<u64, FenceError> {
        Ok(self.discover().await?.slot)
    }

    async fn write(
        &self,
        source: &impl SequencerSource,
        body: Option<Bytes>,
    ) -> Result<Result<Appended, Refused>, FenceError> {
        let sequencer = source.sequencer_now()?.into_owned();
        if body.is_some() && sequencer.mode() != Mode::Exclusive {
            FenceStats::count(&self.fence.stats.refused);
            return Ok(Err(Refused::SharedOnWrite {
                lock: sequencer.lock().clone(),
                presented: sequencer.generation(),
            }));
        }
        let write_id = record::new_write_id();
        let mut budget = Budget::start(&self.fence.retry);
        let cached = self.tail.lock().expect("not poisoned").clone();
        let mut tail = match cached {
            Some(tail) => tail,
            None => self.discover().await?,
        };
        loop {
            if let Some(lock) = &tail.lock
                && lock != sequencer.lock().as_str()
            {
                return Ok(Err(Refused::LockMismatch {
                    requested: palisade_core::LockName::new(lock.as_str()).map_err(|error| {
                        FenceError::Corrupt {
                            path: self.slot_path(tail.slot).to_string(),
                            detail: error.to_string(),
                        }
                    })?,
                    presented: sequencer.lock().clone(),
                }));
            }
            let Some(after) = tail.marks.admit(sequencer.mode(), sequencer.generation()) else {
                return Ok(Err(self.fence.refuse(
                    &sequencer,
                    tail.marks,
                    &self.slot_path(tail.slot + 1),
                )));
            };
            if body.is_none() && after == tail.marks && tail.slot > 0 {
                return Ok(Ok(Appended {
                    slot: tail.slot,
                    marks: after,
                }));
            }
            let slot = tail.slot + 1;
            let path = self.slot_path(slot);
            let mut pairs = vec![
                (meta::LOCK, sequencer.lock().to_string()),
                (meta::GENERATION, sequencer.generation().get().to_string()),
                (meta::MARKS, record::encode_marks(after)),
                (meta::WRITE, write_id.clone()),
            ];
            if body.is_none() {
                pairs.push((meta::DELETED, "1".to_owned()));
            }
            let payload = PutPayload::from(body.clone().unwrap_or_default());
            let outcome = conditional_put(
                self.fence.store.as_ref(),
                &path,
                payload,
                PutMode::Create,
                record::attributes(pairs),
            )
            .await;
            match outcome {
                Outcome::Landed(_) => return Ok(Ok(self.landed(&sequencer, slot, after))),
                Outcome::ConditionFailed | Outcome::InDoubt(_) | Outcome::Conflict => {
                    match &outcome {
                        Outcome::ConditionFailed => {
                            FenceStats::count(&self.fence.stats.precondition_failed)
                        }
                        Outcome::Conflict => FenceStats::count(&self.fence.stats.conflicts),
                        _ => FenceStats::count(&self.fence.stats.in_doubt),
                    }
                    let go_on = match outcome {
                        Outcome::ConditionFailed => !budget.expired(),
                        _ => budget.pause().await,
                    };
                    if !go_on {
                        return Err(match outcome {
                            Outcome::InDoubt(message) => FenceError::InDoubt {
                                store: self.fence.name.clone(),
                                path: path.to_string(),
                                write_id,
                                message,
                            },
                            _ => store_error(
                                &self.fence.name,
                                "409 conflicts until the retry budget ran out",
                            ),
                        });
                    }
                    // Whose is the slot? Ours (an in-doubt write landed),
                    // another's (read its marks and decide again), or
                    // nobody's yet (send the same entry again: both copies
                    // are `If-None-Match: *` on one slot, so one lands).
                    match self.fence.head(&path).await {
                        Ok(Some(head)) if head.write_id.as_deref() == Some(write_id.as_str()) => {
                            return Ok(Ok(self.landed(&sequencer, slot, after)));
                        }
                        Ok(Some(head)) => {
                            let (_, marks) = entry_fields(&path, &head)?;
                            tail = Tail {
                                slot,
                                marks,
                                lock: head_lock(&head, &sequencer),
                            };
                        }
                        Ok(None) => {}
                        Err(error) => {
                            if !budget.pause().await {
                                return Err(error);
                            }
                        }
                    }
                }
                Outcome::Fatal(error) => return Err(store_error(&self.fence.name, error)),
            }
        }
    }

    fn landed(&self, sequencer: &Sequencer, slot: u64, marks: Marks) -> Appended {
        FenceStats::count(&self.fence.stats.landed);
        tracing::debug!(target: "palisade_fence_object", lock = %sequencer.lock(), generation = sequencer.generation().get(), slot, %marks, "log entry landed");
        *self.tail.lock().expect("not poisoned") = Some(Tail {
            slot,
            marks,
            lock: Some(sequencer.lock().to_string()),
        });
        Appended { slot, marks }
    }

    /// The last entry in the store: the highest slot listed under the
    /// prefix (S3 lists are strongly consistent), and its marks.
    async fn discover(&self) -> Result<Tail, FenceError> {
        let listed: Vec<_> = self
            .fence
            .store
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(|error| store_error(&self.fence.name, error))?;
        let last = listed
            .iter()
            .filter_map(|object| {
                let name = object.location.filename()?;
                (name.len() == SLOT_DIGITS)
                    .then(|| name.parse::<u64>().ok())
                    .flatten()
            })
            .max();
        let Some(slot) = last else {
            return Ok(Tail {
                slot: 0,
                marks: Marks::ZERO,
                lock: None,
            });
        };
        let path = self.slot_path(slot);
        let head = self
            .fence
            .head(&path)
            .await?
            .ok_or_else(|| FenceError::Corrupt {
                path: path.to_string(),
                detail: "listed, then not found: log entries must never be deleted".into(),
            })?;
        let (_, marks) = entry_fields(&path, &head)?;
        Ok(Tail {
            slot,
            marks,
            lock: head.lock.clone(),
        })
    }
}

/// The generation and marks a log entry must carry.
fn entry_fields(path: &Path, head: &Head) -> Result<(u64, Marks), FenceError> {
    match (head.generation, head.marks) {
        (Some(generation), Some(marks)) => Ok((generation, marks)),
        _ => Err(FenceError::Corrupt {
            path: path.to_string(),
            detail:
                "a log slot without the fence's generation and marks (written around the fence?)"
                    .into(),
        }),
    }
}

fn head_lock(head: &Head, sequencer: &Sequencer) -> Option<String> {
    head.lock
        .clone()
        .or_else(|| Some(sequencer.lock().to_string()))
}
