//! Integration tests of the etcd lock backend, against real etcd processes
//! started on loopback by the testkit (or the etcd named by
//! `PALISADE_ETCD_ENDPOINTS`). No test here mocks etcd.

mod cancel;
mod changes;
mod cluster;
mod conformance;
mod errors;
mod fixtures;
mod lease;
mod live_check;
mod mutex;
mod pause;
mod raise_floor;
mod secrets;
mod signing;
