//! Whose turn it is, from one listing of a lock directory: the
//! read/write-lock recipe, decided with no I/O.

use palisade_core::Mode;

use crate::names::{Child, Contender, parse_child};

/// What a contender does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nothing conflicting is ahead and no lock-delay is in force: the
    /// lock is granted.
    Granted,
    /// Wait until this node is deleted, then look again. For an exclusive
    /// contender it is the contender just ahead; for a shared one, the
    /// last exclusive contender ahead. Watching one node each means a
    /// release wakes one waiter, not the herd.
    Behind(String),
    /// A holder's session ended without a release and its lock-delay is in
    /// force: wait until this marker node is deleted (ZooKeeper deletes it
    /// when the lock-delay session it hangs on expires).
    Delayed(String),
    /// Our node is not in the listing: the session that created it ended.
    Gone,
}

/// The turn of the contender named `ours`, in `mode`, among `children`.
pub(crate) fn turn(children: &[String], ours: &str, mode: Mode) -> Turn {
    let mut contenders: Vec<Contender> = Vec::new();
    let mut markers: Vec<(String, i64)> = Vec::new();
    for child in children {
        match parse_child(child) {
            Child::Contender(contender) => contenders.push(contender),
            Child::Marker {
                name,
                holder_sequence,
            } => markers.push((name, holder_sequence)),
            Child::Other => {}
        }
    }
    let Some(our_sequence) = contenders
        .iter()
        .find(|contender| contender.name == ours)
        .map(|contender| contender.sequence)
    else {
        return Turn::Gone;
    };
    let blocker = contenders
        .iter()
        .filter(|contender| contender.sequence < our_sequence)
        .filter(|contender| mode == Mode::Exclusive || contender.mode == Mode::Exclusive)
        .max_by_key(|contender| contender.sequence);
    if let Some(blocker) = blocker {
        return Turn::Behind(blocker.name.clone());
    }
    // A marker whose holder is still listed belongs to a live hold; one
    // whose holder is gone is a lock-delay in force.
    let orphan = markers
        .into_iter()
        .filter(|(_, holder)| contenders.iter().all(|c| c.sequence != *holder))
        .min_by_key(|(_, holder)| *holder);
    match orphan {
        Some((marker, _)) => Turn::Delayed(marker),
        None => Turn::Granted,
    }
}

/// The contenders of a listing that hold the lock now, in sequence order:
/// the first exclusive contender if it is first, else the shared ones
/// before the first exclusive one. (No lock-delay applies to a holder.)
pub(crate) fn holders(children: &[String]) -> (Vec<Contender>, Vec<Contender>) {
    let mut contenders: Vec<Contender> = children
        .iter()
        .filter_map(|child| match parse_child(child) {
            Child::Contender(contender) => Some(contender),
            _ => None,
        })
        .collect();
    contenders.sort_by_key(|contender| contender.sequence);
    let split = match contenders.first() {
        Some(first) if first.mode == Mode::Exclusive => 1,
        _ => contenders
            .iter()
            .position(|contender| contender.mode == Mode::Exclusive)
            .unwrap_or(contenders.len()),
    };
    let waiters = contenders.split_off(split);
    (contenders, waiters)
}

/// The lock-delay markers of a listing whose holder is gone.
pub(crate) fn orphan_markers(children: &[String]) -> Vec<String> {
    let parsed: Vec<Child> = children.iter().map(|child| parse_child(child)).collect();
    let sequences: Vec<i64> = parsed
        .iter()
        .filter_map(|child| match child {
            Child::Contender(contender) => Some(contender.sequence),
            _ => None,
        })
        .collect();
    parsed
        .into_iter()
        .filter_map(|child| match child {
            Child::Marker {
                name,
                holder_sequence,
            } if !sequences.contains(&holder_sequence) => Some(name),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::marker_name;

    fn w(sequence: i64) -> String {
        format!("w{sequence}__lock__{sequence:010}")
    }

    fn r(sequence: i64) -> String {
        format!("r{sequence}__rlock__{sequence:010}")
    }

    fn list(names: &[String]) -> Vec<String> {
        names.to_vec()
    }

    #[test]
    fn a_writer_waits_for_the_node_just_ahead_of_it() {
        let children = list(&[w(3), r(1), r(2), "lease_holder".into()]);
        assert_eq!(turn(&children, &w(3), Mode::Exclusive), Turn::Behind(r(2)));
        assert_eq!(turn(&children, &r(1), Mode::Shared), Turn::Granted);
        assert_eq!(turn(&children, &r(2), Mode::Shared), Turn::Granted);
        assert_eq!(turn(&[w(5)], &w(5), Mode::Exclusive), Turn::Granted);
    }

    #[test]
    fn a_reader_waits_for_the_last_writer_ahead_only() {
        let children = list(&[w(1), r(2), w(3), r(4), r(5)]);
        assert_eq!(turn(&children, &r(5), Mode::Shared), Turn::Behind(w(3)));
        assert_eq!(turn(&children, &r(2), Mode::Shared), Turn::Behind(w(1)));
        assert_eq!(turn(&children, &w(3), Mode::Exclusive), Turn::Behind(r(2)));
    }

    #[test]
    fn an_orphaned_marker_delays_and_a_held_one_does_not() {
        let held = list(&[w(4), marker_name(4), w(6)]);
        assert_eq!(turn(&held, &w(6), Mode::Exclusive), Turn::Behind(w(4)));
        let orphaned = list(&[marker_name(4), w(6)]);
        assert_eq!(
            turn(&orphaned, &w(6), Mode::Exclusive),
            Turn::Delayed(marker_name(4))
        );
        assert_eq!(orphan_markers(&orphaned), vec![marker_name(4)]);
        assert!(orphan_markers(&held).is_empty());
    }

    #[test]
    fn a_missing_node_is_gone() {
        assert_eq!(turn(&[w(1)], &w(2), Mode::Exclusive), Turn::Gone);
    }

    #[test]
    fn holders_are_the_first_writer_or_the_readers_before_any_writer() {
        let names = |contenders: Vec<Contender>| {
            contenders
                .into_iter()
                .map(|contender| contender.name)
                .collect::<Vec<_>>()
        };
        let (holding, waiting) = holders(&list(&[r(2), w(3), r(1), r(4)]));
        assert_eq!(names(holding), [r(1), r(2)]);
        assert_eq!(names(waiting), [w(3), r(4)]);
        let (holding, waiting) = holders(&list(&[r(2), w(1)]));
        assert_eq!(names(holding), [w(1)]);
        assert_eq!(names(waiting), [r(2)]);
        let (holding, waiting) = holders(&[]);
        assert!(holding.is_empty() && waiting.is_empty());
    }
}
