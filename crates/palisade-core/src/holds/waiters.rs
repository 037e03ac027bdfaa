//! The per-process waiter bound: how many acquisitions may wait for one
//! lock at once before the next fails fast with [`LockError::Busy`]
//! (unbounded queues turn a hot lock into a memory and latency problem;
//! seed 001).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{LockError, LockName};

/// Waiters per lock name, shared by every session the bound spans: clone
/// one `Waiters` into each (a client shares its own among its sessions).
///
/// ```
/// use palisade_core::holds::Waiters;
/// use palisade_core::{LockError, LockName};
///
/// let waiters = Waiters::default();
/// let name = LockName::new("hot")?;
/// let first = waiters.enter(&name, 2)?;
/// let _second = waiters.clone().enter(&name, 2)?;
/// assert!(matches!(waiters.enter(&name, 2), Err(LockError::Busy { waiters: 2, .. })));
/// drop(first);
/// assert_eq!(waiters.count(&name), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Waiters {
    counts: Arc<Mutex<HashMap<LockName, usize>>>,
}

impl Waiters {
    /// Counts one more waiter on `name`, or fails with
    /// [`LockError::Busy`] if `max_waiters` already wait.
    pub fn enter(&self, name: &LockName, max_waiters: usize) -> Result<WaiterSlot, LockError> {
        let mut counts = self.lock();
        let count = counts.entry(name.clone()).or_insert(0);
        if *count >= max_waiters {
            tracing::warn!(lock = %name, waiters = *count, "refused: waiter bound reached");
            return Err(LockError::Busy {
                name: name.clone(),
                waiters: max_waiters,
            });
        }
        *count += 1;
        Ok(WaiterSlot {
            waiters: self.clone(),
            name: name.clone(),
        })
    }

    /// How many wait for `name` now.
    pub fn count(&self, name: &LockName) -> usize {
        self.lock().get(name).copied().unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, usize>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiters")
            .field("locks", &self.lock().len())
            .finish()
    }
}

/// One counted waiter; uncounted when dropped.
pub struct WaiterSlot {
    waiters: Waiters,
    name: LockName,
}

impl Drop for WaiterSlot {
    fn drop(&mut self) {
        let mut counts = self.waiters.lock();
        if let Some(count) = counts.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.name);
            }
        }
    }
}

impl fmt::Debug for WaiterSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaiterSlot")
            .field("name", &self.name)
            .finish()
    }
}
