//! [`MemoryMarks`]: marks in a `HashMap`, for tests and examples.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use palisade_core::{LockName, Sequencer};
use palisade_store::Marks;

use crate::{Admission, MarkStore, MarkStoreError};

/// A [`MarkStore`] in process memory. Marks are lost when the process ends,
/// so a service restarted with `MemoryMarks` forgets every fence: use it in
/// tests, and [`SledMarks`](crate::SledMarks) in production.
///
/// Cheap to clone: clones share the same marks. Check and raise happen
/// under one `std::sync::Mutex`, held for a map lookup and never across an
/// `.await`.
///
/// ```
/// use palisade_core::{Generation, LockName, Mode, Sequencer};
/// use palisade_guard::{Admission, MarkStore, MemoryMarks};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let marks = MemoryMarks::new();
/// let lock = LockName::new("orders/42")?;
/// let holder = |g| Sequencer::new(lock.clone(), Mode::Exclusive, Generation::new(g).unwrap());
/// assert!(matches!(marks.admit(&holder(5)).await?, Admission::Admitted { .. }));
/// assert!(matches!(marks.admit(&holder(4)).await?, Admission::Stale { .. }));
/// assert_eq!(marks.get(&lock).exclusive, 5);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryMarks {
    /// Every lock ever admitted and its marks. Marks must be remembered for
    /// as long as the data they fence, so this map only grows.
    marks: Arc<Mutex<HashMap<LockName, Marks>>>,
}

impl MemoryMarks {
    /// An empty store: every lock has marks 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The marks of `lock`, without waiting.
    pub fn get(&self, lock: &LockName) -> Marks {
        self.lock_map().get(lock).copied().unwrap_or(Marks::ZERO)
    }

    fn lock_map(&self) -> MutexGuard<'_, HashMap<LockName, Marks>> {
        // Every critical section is one lookup and one insert: a panic cannot
        // leave the map half-updated, so a poisoned lock is still consistent.
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admit_now(&self, sequencer: &Sequencer) -> Admission {
        let mut map = self.lock_map();
        let before = map.get(sequencer.lock()).copied().unwrap_or(Marks::ZERO);
        match before.admit(sequencer.mode(), sequencer.generation()) {
            Some(after) => {
                if after != before {
                    map.insert(sequencer.lock().clone(), after);
                }
                Admission::Admitted { marks: after }
            }
            None => Admission::Stale { marks: before },
        }
    }
}

impl MarkStore for MemoryMarks {
    fn admit(
        &self,
        sequencer: &Sequencer,
    ) -> impl Future<Output = Result<Admission, MarkStoreError>> + Send {
        let admission = self.admit_now(sequencer);
        async move { Ok(admission) }
    }

    fn marks(&self, lock: &LockName) -> impl Future<Output = Result<Marks, MarkStoreError>> + Send {
        let marks = self.get(lock);
        async move { Ok(marks) }
    }
}
