//! Test hooks (the `testing` feature): [`FaultyStore`], a store that
//! forwards to a real one and spoils writes on the way, for the in-doubt
//! tests and the fault suite. Never needed in production.

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use tokio::task::JoinHandle;

use crate::RESERVED;

/// What happens to a spoiled conditional write of a user object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Applied by the store; its answer lost (a timeout after send).
    AnswerLost,
    /// Never reached the store: the caller cannot tell.
    RequestLost,
    /// Reaches the store only later (500 ms), after the caller gave up
    /// on it; see [`FaultyStore::take_late`].
    DeliveredLate,
}

/// A store that forwards to `inner`, spoils the next conditional writes of
/// user objects (not the fence's own, under `.palisade/`) as told, and can
/// hold every write of a user object for a while before sending it (a slow
/// link: the window between a writer's check and its write landing).
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    fault: Mutex<Fault>,
    armed: AtomicUsize,
    delay: Mutex<Duration>,
    late: Mutex<Option<JoinHandle<object_store::Result<PutResult>>>>,
}

impl FaultyStore {
    /// Forwards to `inner`, spoiling nothing yet.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyStore {
            inner,
            fault: Mutex::new(Fault::AnswerLost),
            armed: AtomicUsize::new(0),
            delay: Mutex::new(Duration::ZERO),
            late: Mutex::new(None),
        }
    }

    /// Spoils the next `count` conditional writes of user objects with
    /// `fault`.
    pub fn spoil_next(&self, fault: Fault, count: usize) {
        *self.fault.lock().expect("not poisoned") = fault;
        self.armed.store(count, Ordering::SeqCst);
    }

    /// Holds every write of a user object for `delay` before sending it.
    pub fn set_delay(&self, delay: Duration) {
        *self.delay.lock().expect("not poisoned") = delay;
    }

    /// The late original of the last [`Fault::DeliveredLate`] write.
    pub fn take_late(&self) -> Option<JoinHandle<object_store::Result<PutResult>>> {
        self.late.lock().expect("not poisoned").take()
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner.to_string())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

fn timed_out() -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: "request timed out after it was sent".into(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let user_object = location
            .parts()
            .next()
            .is_none_or(|first| first.as_ref() != RESERVED);
        let delay = *self.delay.lock().expect("not poisoned");
        if user_object && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let conditional = !matches!(opts.mode, PutMode::Overwrite);
        let spoil = user_object
            && conditional
            && self
                .armed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if !spoil {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let fault = *self.fault.lock().expect("not poisoned");
        match fault {
            Fault::AnswerLost => {
                self.inner.put_opts(location, payload, opts).await?;
            }
            Fault::RequestLost => {}
            Fault::DeliveredLate => {
                let (inner, location) = (Arc::clone(&self.inner), location.clone());
                *self.late.lock().expect("not poisoned") = Some(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    inner.put_opts(&location, payload, opts).await
                }));
            }
        }
        Err(timed_out())
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
