//! The start-up probe: before a store is used, check that it enforces the
//! conditions the fence stands on, with writes that must be refused.
//!
//! Some S3-compatible stores accept `If-Match` and `If-None-Match` and
//! ignore them, answering 200. Over such a store every fenced write would
//! land, stale or not, and nothing would say so. The probe writes one
//! object under `.palisade/probe/` and checks, in order:
//!
//! 1. a create (`If-None-Match: *`) of a new object lands;
//! 2. a second create of the same object is refused (412);
//! 3. a write with `If-Match` on an ETag the object never had is refused
//!    (412);
//! 4. a write with `If-Match` on its real ETag lands;
//! 5. the object reads back with the metadata the fence wrote (the
//!    generation, version and write id live there).
//!
//! A store failing 2 or 3 is refused with [`FenceError::ConditionsIgnored`],
//! one failing 1, 4 or 5 with [`FenceError::Unsupported`], both naming the
//! store. The probe object is deleted afterwards.

use object_store::ObjectStoreExt as _;
use object_store::path::{Path, PathPart};
use object_store::{PutMode, PutPayload, UpdateVersion};

use crate::FenceError;
use crate::fence::ObjectFence;
use crate::outcome::{Outcome, conditional_put, store_error};
use crate::record::{self, RESERVED, meta};

/// Runs the probe against `fence`'s store.
pub(crate) async fn probe(fence: &ObjectFence) -> Result<(), FenceError> {
    let write_id = record::new_write_id();
    let path = Path::from_iter([
        PathPart::from(RESERVED),
        PathPart::from("probe"),
        PathPart::from(write_id.as_str()),
    ]);
    let result = run(fence, &path, &write_id).await;
    // Best effort: a probe object left behind harms nothing.
    let _ = fence.store.delete(&path).await;
    match &result {
        Ok(()) => {
            tracing::info!(target: "palisade_fence_object", store = %fence.name, "the store enforces conditional writes")
        }
        Err(error) => {
            tracing::error!(target: "palisade_fence_object", store = %fence.name, %error, "store refused by the probe")
        }
    }
    result
}

async fn run(fence: &ObjectFence, path: &Path, write_id: &str) -> Result<(), FenceError> {
    let store = fence.store.as_ref();
    let unsupported = |detail: String| FenceError::Unsupported {
        store: fence.name.clone(),
        detail,
    };
    let ignored = |condition| FenceError::ConditionsIgnored {
        store: fence.name.clone(),
        condition,
    };
    let attributes = || record::attributes([(meta::WRITE, write_id.to_owned())]);
    let put = |bytes: &'static str, mode| {
        conditional_put(store, path, PutPayload::from(bytes), mode, attributes())
    };

    // 1. A create lands.
    let first = match put("palisade probe 1", PutMode::Create).await {
        Outcome::Landed(result) => result,
        Outcome::Fatal(error) => {
            return Err(unsupported(format!(
                "a create (`If-None-Match: *`) failed: {error}"
            )));
        }
        other => {
            return Err(unsupported(format!(
                "a create (`If-None-Match: *`) of a new object did not land: {other:?}"
            )));
        }
    };
    let Some(e_tag) = first.e_tag else {
        return Err(unsupported(
            "it gives no ETag, which conditional writes need".into(),
        ));
    };
    // 2. A second create is refused.
    match put("palisade probe 2", PutMode::Create).await {
        Outcome::ConditionFailed => {}
        Outcome::Landed(_) => return Err(ignored("If-None-Match: *")),
        other => {
            return Err(store_error(
                &fence.name,
                format!("probe: a second create answered {other:?}"),
            ));
        }
    }
    // 3. A wrong ETag is refused.
    let wrong = UpdateVersion {
        e_tag: Some("\"palisade-probe-no-such-etag\"".into()),
        version: None,
    };
    match put("palisade probe 3", PutMode::Update(wrong)).await {
        Outcome::ConditionFailed => {}
        Outcome::Landed(_) => return Err(ignored("If-Match")),
        other => {
            return Err(store_error(
                &fence.name,
                format!("probe: a write on a wrong ETag answered {other:?}"),
            ));
        }
    }
    // 4. The right ETag lands.
    let right = UpdateVersion {
        e_tag: Some(e_tag),
        version: None,
    };
    match put("palisade probe 4", PutMode::Update(right)).await {
        Outcome::Landed(_) => {}
        Outcome::Fatal(error) => {
            return Err(unsupported(format!(
                "a write with `If-Match` failed: {error}"
            )));
        }
        other => {
            return Err(unsupported(format!(
                "a write with `If-Match` on the object's own ETag did not land: {other:?}"
            )));
        }
    }
    // 5. The metadata reads back.
    let head = fence.head(path).await?.ok_or_else(|| {
        unsupported("the probe object it acknowledged reads back as absent".into())
    })?;
    if head.write_id.as_deref() != Some(write_id) {
        return Err(unsupported(
            "it does not keep an object's user metadata, where the fence keeps the generation and write id".into(),
        ));
    }
    Ok(())
}
