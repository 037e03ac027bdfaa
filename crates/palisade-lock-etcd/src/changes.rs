//! Hints at changes under a key range ([`Inspect::changes`]): one etcd
//! watch stream per observer, on the range of the locks it reads.
//!
//! Every contender key and lock-delay marker lives under its lock's
//! directory, so a grant (a waiter's blocker deleted, a contender put), a
//! release and a lease's end (etcd deletes its keys) are each an event in
//! the range. The hint waits for the watch's creation: once
//! [`changes`] returns, no such change goes without a hint. When the
//! stream breaks, the observer is hinted (it may have missed events), the
//! stream is reopened from "now" and hinted again once it is; while it is
//! down, hints come every `every`, as without a watch.
//!
//! [`Inspect::changes`]: palisade_core::Inspect::changes

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{WatchOptions, WatchStream};
use palisade_core::{ChangeSender, Changes, LockError};

use crate::client::{ClientInner, Resend, within};

/// Watches the keys starting with `key` and hints at each change.
pub(crate) async fn changes(
    inner: Arc<ClientInner>,
    key: String,
    every: Duration,
) -> Result<Changes, LockError> {
    let stream = open(&inner, &key).await?;
    let (sender, changes) = Changes::pushed();
    tokio::spawn(follow(inner, key, every, sender, stream));
    Ok(changes)
}

/// Opens a prefix watch on `key` and waits for etcd to confirm it.
async fn open(inner: &ClientInner, key: &str) -> Result<WatchStream, LockError> {
    let client = inner.client.watch_client();
    let options = WatchOptions::new().with_prefix();
    within("watch", inner.request_timeout(), Resend::Always, || {
        let (mut client, key, options) = (client.clone(), key.to_owned(), options.clone());
        async move {
            let mut stream = client.watch(key, Some(options)).await?;
            // The first answer is the creation; changes after it are seen.
            match stream.message().await? {
                Some(response) if response.created() => Ok(stream),
                _ => Err(etcd_client::Error::WatchError(
                    "the watch was not created".to_owned(),
                )),
            }
        }
    })
    .await
}

async fn follow(
    inner: Arc<ClientInner>,
    key: String,
    every: Duration,
    sender: ChangeSender,
    mut stream: WatchStream,
) {
    loop {
        // Follow the stream until it breaks or the observer leaves.
        loop {
            tokio::select! {
                () = sender.closed() => return,
                message = stream.message() => match message {
                    Ok(Some(response)) if !response.canceled() => {
                        if !response.events().is_empty() {
                            sender.notify();
                        }
                    }
                    _ => break,
                },
            }
        }
        tracing::debug!(key, "a changes watch broke; reopening it");
        match sender.reopen(every, || open(&inner, &key)).await {
            Some(reopened) => stream = reopened,
            None => return,
        }
    }
}
