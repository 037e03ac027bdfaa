//! Helpers shared by the etcd engine's test binaries.

#![allow(dead_code, unreachable_pub)]

use std::time::{SystemTime, UNIX_EPOCH};

use palisade_core::{Generation, LockName, Mode, Sequencer};
use palisade_store::{Op, RequestId, WriteRequest};
use palisade_store_etcd::{EtcdEngine, EtcdEngineConfig};

/// A prefix no other run uses, so reruns against one etcd never collide.
pub fn unique_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("/palisade-test/{test}-{}-{nanos}", std::process::id())
}

pub fn config(endpoints: Vec<String>, test: &str) -> EtcdEngineConfig {
    EtcdEngineConfig::new(endpoints)
        .expect("valid endpoints")
        .with_prefix(unique_prefix(test))
        .expect("valid prefix")
}

pub async fn connect(config: EtcdEngineConfig) -> EtcdEngine {
    EtcdEngine::connect(config)
        .await
        .expect("connecting the etcd engine")
}

pub fn lock(name: &str) -> LockName {
    LockName::new(name).expect("a valid lock name")
}

pub fn seq(lock_name: &str, mode: Mode, generation: u64) -> Sequencer {
    Sequencer::new(
        lock(lock_name),
        mode,
        Generation::new(generation).expect("generations start at 1"),
    )
}

pub fn write(lock_name: &str, generation: u64, ops: Vec<Op>, id: Option<&str>) -> WriteRequest {
    WriteRequest::new(
        seq(lock_name, Mode::Exclusive, generation),
        ops,
        id.map(|id| RequestId::new(id).expect("a valid request id")),
    )
}
