//! Fencing on acquire: a new holder raises its lock's marks before it
//! does anything else.
//!
//! The server refuses a request only once a newer generation has been
//! honoured. Between a grant and the new holder's first request, an older
//! holder that was paused past its lease can still write: nothing newer
//! has reached the server yet. [`Client::fence`] closes that window
//! the moment the lock is granted.

use palisade_core::{Mode, SequencerSource};

use crate::{Client, ClientError, Marks, Refused};

/// The key a shared fence reads. A read is the only request a shared
/// sequencer may make, and its answer carries the marks whether the key
/// exists or not; a key starting with NUL is unlikely to hold a value.
const SHARED_FENCE_KEY: &[u8] = b"\0palisade-fence";

impl Client {
    /// Raises `sequencer`'s lock's marks to its generation without touching
    /// data, and returns the marks after it.
    ///
    /// Exclusive: an empty batch (`{"ops": []}`), which raises `H_excl`.
    /// Shared: a fenced read, which raises `H_shared`. Either way every
    /// request of an older holder is refused from then on. A sequencer
    /// older than the marks is [`Refused::Stale`] and changes nothing.
    ///
    /// `holder` is a [`Sequencer`](palisade_core::Sequencer) or a lock guard: call it right after
    /// acquiring, before the first read or write. A guard is asked first,
    /// so once its lease may have lapsed nothing is sent and the call fails
    /// with [`ClientError::Lock`].
    ///
    /// ```no_run
    /// # use palisade_client::{Client, Refused};
    /// # use palisade_core::{Lock, LockName, Mode};
    /// # async fn example<L: Lock>(locks: &L, server: &Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let guard = locks.acquire(&LockName::new("orders/42")?, Mode::Exclusive).await?;
    /// match server.fence(&guard).await? {
    ///     // From here on, older holders are refused.
    ///     Ok(marks) => println!("fenced; marks now {marks:?}"),
    ///     // The lock service handed out a generation the server has
    ///     // already passed: its counter went backwards.
    ///     Err(Refused::Stale { marks, .. }) => return Err(format!("behind the marks {marks:?}").into()),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fence<S: SequencerSource + ?Sized>(
        &self,
        holder: &S,
    ) -> Result<Result<Marks, Refused>, ClientError> {
        let sequencer = holder.sequencer_now()?;
        let sequencer = sequencer.as_ref();
        let outcome = match sequencer.mode() {
            Mode::Exclusive => self
                .batch(sequencer, &[], None)
                .await?
                .map(|written| written.marks),
            Mode::Shared => self
                .get(sequencer.lock(), SHARED_FENCE_KEY, Some(sequencer))
                .await?
                .map(|read| read.marks),
        };
        if let Ok(marks) = &outcome {
            tracing::debug!(
                lock = %sequencer.lock(),
                generation = sequencer.generation().get(),
                exclusive = marks.exclusive,
                shared = marks.shared,
                "fenced"
            );
        }
        Ok(outcome)
    }
}
