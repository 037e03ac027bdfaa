//! From the engine's plans to etcd Txns, and from etcd's answers back.

use std::collections::HashMap;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use crate::plan::{Commit, Condition, Found, Range};

/// A read-only Txn over `ranges`: one linearizable snapshot.
pub(crate) fn read_txn(ranges: &[Range]) -> Txn {
    Txn::new().and_then(ranges.iter().map(range_op).collect::<Vec<_>>())
}

fn range_op(range: &Range) -> TxnOp {
    match range {
        Range::Key { key, keys_only } => {
            let options = keys_only.then(|| GetOptions::new().with_keys_only());
            TxnOp::get(key.clone(), options)
        }
        Range::FirstUnder { prefix } => TxnOp::get(
            prefix.clone(),
            Some(GetOptions::new().with_prefix().with_limit(1)),
        ),
    }
}

/// The commit Txn of `commit`, its success branch in this order: record
/// choice, data writes, metadata puts and deletes, `then_read`.
pub(crate) fn commit_txn(commit: &Commit) -> Txn {
    let compares: Vec<Compare> = commit
        .conditions
        .iter()
        .map(|condition| match condition {
            Condition::Unchanged { key, mod_revision } => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, *mod_revision)
            }
            Condition::Absent { key } => Compare::version(key.clone(), CompareOp::Equal, 0),
            Condition::Holds { key, value } => {
                Compare::value(key.clone(), CompareOp::Equal, value.clone())
            }
        })
        .collect();
    let mut success = Vec::new();
    if let Some(choice) = &commit.record_choice {
        // Evaluated before the data writes below, so it sees the key as it
        // was before this request.
        success.push(TxnOp::txn(
            Txn::new()
                .when([Compare::version(
                    choice.data_key.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then([TxnOp::put(
                    choice.record_key.clone(),
                    choice.if_present.clone(),
                    None,
                )])
                .or_else([TxnOp::put(
                    choice.record_key.clone(),
                    choice.if_absent.clone(),
                    None,
                )]),
        ));
    }
    for (key, value) in &commit.data {
        success.push(match value {
            Some(value) => {
                let options = commit
                    .data_reports_previous
                    .then(|| PutOptions::new().with_prev_key());
                TxnOp::put(key.clone(), value.clone(), options)
            }
            // A delete reports how many keys it removed either way.
            None => TxnOp::delete(key.clone(), None),
        });
    }
    success.extend(
        commit
            .puts
            .iter()
            .map(|(key, value)| TxnOp::put(key.clone(), value.clone(), None)),
    );
    success.extend(
        commit
            .deletes
            .iter()
            .map(|key| TxnOp::delete(key.clone(), None)),
    );
    success.extend(commit.then_read.iter().map(range_op));
    let failure: Vec<TxnOp> = commit.else_read.iter().map(range_op).collect();
    Txn::new().when(compares).and_then(success).or_else(failure)
}

/// What a commit Txn did.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Applied at `revision`. `existed` says, per data key written, whether
    /// it existed before (only when the commit asked for it); `then_found`
    /// is the `then_read` ranges.
    Committed {
        revision: i64,
        existed: HashMap<Vec<u8>, bool>,
        then_found: Vec<Option<Found>>,
    },
    /// A condition failed; nothing applied. `else_found` is the `else_read`
    /// ranges, read at that moment.
    Failed { else_found: Vec<Option<Found>> },
}

/// Reads `response` as the answer to `commit_txn(commit)`.
pub(crate) fn outcome(commit: &Commit, response: &TxnResponse) -> Outcome {
    let responses = response.op_responses();
    if !response.succeeded() {
        return Outcome::Failed {
            else_found: responses.iter().map(first_kv).collect(),
        };
    }
    let revision = response.header().map_or(0, |header| header.revision());
    let data_from = usize::from(commit.record_choice.is_some());
    let existed = commit
        .data
        .iter()
        .zip(responses.iter().skip(data_from))
        .map(|((key, _), response)| {
            let existed = match response {
                TxnOpResponse::Put(put) => put.prev_key().is_some(),
                TxnOpResponse::Delete(delete) => delete.deleted() > 0,
                _ => false,
            };
            (key.clone(), existed)
        })
        .collect();
    let then_from = responses.len().saturating_sub(commit.then_read.len());
    Outcome::Committed {
        revision,
        existed,
        then_found: responses[then_from..].iter().map(first_kv).collect(),
    }
}

/// The ranges of a read Txn's answer, in order.
pub(crate) fn snapshot_of(response: &TxnResponse) -> Vec<Option<Found>> {
    response.op_responses().iter().map(first_kv).collect()
}

fn first_kv(response: &TxnOpResponse) -> Option<Found> {
    match response {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| Found {
            key: kv.key().to_vec(),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
        }),
        _ => None,
    }
}
