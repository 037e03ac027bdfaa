//! The end-to-end checks of the `palisade-tests` crate in one binary (one
//! link of the dependency tree): fencing on each lock backend, the GC-pause
//! story across processes, the demos, the hostile request corpus and the
//! deploy files. The fault suite keeps its own binaries (`faults`,
//! `faults_net`, `faults_disk`): each runs its scenarios with the machine
//! to itself.
//!
//! - `fencing`: the vertical slice on the embedded backend.
//! - `etcd_fencing`, `redis_fencing`, `redlock_fencing`, `sql_fencing`:
//!   each backend's own hazards, with a resource server fencing every write.
//! - `gc_pause`: a holder stopped (SIGSTOP) past its lease in its own
//!   process; its late write is refused (and, on ZooKeeper, also with a
//!   new holder that only fences on acquire).
//! - `demos`: the GC-pause story and the flash sale as checks.
//! - `hostile`: the hostile corpus; nothing is written.
//! - `deploy`: the deploy files, checked against the code.
//! - `tidy`: docs/ARCHITECTURE.md's rules (dependencies, code map, no
//!   unused dependency, no skipped test), checked against the code.
//! - `store_secrets`: no password in any output of `--store`'s errors.

mod demos;
mod deploy;
mod etcd_fencing;
mod fencing;
mod gc_pause;
mod hostile;
mod redis_fencing;
mod redlock_fencing;
mod sql_fencing;
mod store_secrets;
mod tidy;

use palisade::Generation;
use palisade::client::Refused;

/// Asserts that `refused` is a stale refusal of generation `presented`,
/// naming the lock's exclusive mark `mark` (the newer holder's).
fn assert_stale(refused: Refused, presented: Generation, mark: u64) {
    match refused {
        Refused::Stale {
            presented: refused_generation,
            marks,
            ..
        } => {
            assert_eq!(refused_generation, presented);
            assert_eq!(marks.exclusive, mark);
        }
        other => panic!("expected a stale refusal of {presented}, got {other:?}"),
    }
}
