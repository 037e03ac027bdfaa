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

    // A write that must land, or the store cannot carry the fence.
    let landed = |outcome: Outcome, write: &str| match outcome {
        Outcome::Landed(result) => Ok(result),
        Outcome::Fatal(error) => Err(unsupported(format!("{write} failed: {error}"))),
        other => Err(unsupported(format!("{write} did not land: {other:?}"))),
    };
    // A write that must be refused (412): landing shows `condition` ignored.
    let refused = |outcome: Outcome, condition, write: &str| match outcome {
        Outcome::ConditionFailed => Ok(()),
        Outcome::Landed(_) => Err(ignored(condition)),
        other => Err(store_error(
            &fence.name,
            format!("probe: {write} answered {other:?}"),
        )),
    };

    // 1. A create lands.
    let create = put("palisade probe 1", PutMode::Create).await;
    let first = landed(create, "a create (`If-None-Match: *`) of a new object")?;
    let Some(e_tag) = first.e_tag else {
        return Err(unsupported(
            "it gives no ETag, which conditional writes need".into(),
        ));
    };
    // 2. A second create is refused.
    let again = put("palisade probe 2", PutMode::Create).await;
    refused(again, "If-None-Match: *", "a second create")?;
    // 3. A wrong ETag is refused.
    let wrong = UpdateVersion {
        e_tag: Some("\"palisade-probe-no-such-etag\"".into()),
        version: None,
    };
    let wrong = put("palisade probe 3", PutMode::Update(wrong)).await;
    refused(wrong, "If-Match", "a write on a wrong ETag")?;
    // 4. The right ETag lands.
    let right = UpdateVersion {
        e_tag: Some(e_tag),
        version: None,
    };
    let right = put("palisade probe 4", PutMode::Update(right)).await;
    landed(right, "a write with `If-Match` on the object's own ETag")?;
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
