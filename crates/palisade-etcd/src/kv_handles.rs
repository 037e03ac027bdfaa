//! KV client handles kept between requests.
//!
//! etcd-client's `KvClient` sends through `&mut self`, so each concurrent
//! request needs a handle of its own. A handle cloned afresh per request
//! copies the balanced channel and, on its first request, builds the
//! channel's send slot again: three allocations and a few hundred
//! instructions a request, which a lock cycle of two requests feels. A kept
//! handle is ready: requests borrow one from here and put it back.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};

use etcd_client::KvClient;

/// More idle handles than this are dropped: a burst of concurrent requests
/// does not leave its peak behind.
const MAX_IDLE: usize = 64;

/// A pool of `KvClient` handles on one connection.
pub struct KvHandles {
    /// What new handles are cloned from (with its options, such as the
    /// decoding limit, set).
    template: KvClient,
    idle: Mutex<Vec<KvClient>>,
}

impl KvHandles {
    /// Handles cloned from `template`.
    pub fn new(template: KvClient) -> Self {
        KvHandles {
            template,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle handle, or a new one; it comes back when dropped.
    pub fn take(&self) -> KvHandle<'_> {
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        KvHandle {
            kv: Some(kept.unwrap_or_else(|| self.template.clone())),
            home: self,
        }
    }
}

impl std::fmt::Debug for KvHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvHandles").finish_non_exhaustive()
    }
}

/// A handle borrowed from [`KvHandles`] for one request.
pub struct KvHandle<'a> {
    kv: Option<KvClient>,
    home: &'a KvHandles,
}

impl Deref for KvHandle<'_> {
    type Target = KvClient;

    fn deref(&self) -> &KvClient {
        // Set from creation until drop.
        self.kv.as_ref().unwrap_or(&self.home.template)
    }
}

impl DerefMut for KvHandle<'_> {
    fn deref_mut(&mut self) -> &mut KvClient {
        let template = &self.home.template;
        self.kv.get_or_insert_with(|| template.clone())
    }
}

impl Drop for KvHandle<'_> {
    fn drop(&mut self) {
        if let Some(kv) = self.kv.take() {
            let mut idle = self
                .home
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(kv);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle goes back to the pool when dropped and is the one the next
    /// request gets; concurrent requests get handles of their own.
    #[tokio::test]
    async fn handles_come_back_and_are_reused() {
        // etcd-client's channel is lazy: nothing is sent to this port.
        let client = etcd_client::Client::connect(["127.0.0.1:9"], None)
            .await
            .expect("etcd-client connects lazily");
        let handles = KvHandles::new(client.kv_client());
        let idle = |handles: &KvHandles| handles.idle.lock().unwrap().len();
        {
            let _first = handles.take();
            let _second = handles.take();
            assert_eq!(idle(&handles), 0);
        }
        assert_eq!(idle(&handles), 2);
        let _again = handles.take();
        assert_eq!(idle(&handles), 1);
    }
}
