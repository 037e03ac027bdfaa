//! The closed sets of names the API writes: modes, op results, request
//! kinds. Each converts to and from core's type, so a name exists in one
//! place on the wire and the compiler finds a new variant.

use palisade_core::{Mode, OpResult};
use serde::{Deserialize, Serialize};

/// A sequencer's mode: `exclusive` or `shared`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Mode))]
pub enum ModeName {
    /// A writer.
    Exclusive,
    /// A reader.
    Shared,
}

impl From<Mode> for ModeName {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Exclusive => ModeName::Exclusive,
            Mode::Shared => ModeName::Shared,
        }
    }
}

impl From<ModeName> for Mode {
    fn from(mode: ModeName) -> Self {
        match mode {
            ModeName::Exclusive => Mode::Exclusive,
            ModeName::Shared => Mode::Shared,
        }
    }
}

/// What one op of a write did (core's [`OpResult`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OpResult))]
pub enum OpResultName {
    /// A put that created the key.
    Created,
    /// A put that replaced a value.
    Replaced,
    /// A delete that removed a value.
    Deleted,
    /// A delete of a key that was already absent.
    Absent,
    /// A compare-and-swap whose comparison held.
    Swapped,
}

impl From<OpResult> for OpResultName {
    fn from(result: OpResult) -> Self {
        match result {
            OpResult::Created => OpResultName::Created,
            OpResult::Replaced => OpResultName::Replaced,
            OpResult::Deleted => OpResultName::Deleted,
            OpResult::Absent => OpResultName::Absent,
            OpResult::Swapped => OpResultName::Swapped,
        }
    }
}

impl From<OpResultName> for OpResult {
    fn from(result: OpResultName) -> Self {
        match result {
            OpResultName::Created => OpResult::Created,
            OpResultName::Replaced => OpResult::Replaced,
            OpResultName::Deleted => OpResult::Deleted,
            OpResultName::Absent => OpResult::Absent,
            OpResultName::Swapped => OpResult::Swapped,
        }
    }
}

/// The kind of a `/v1/locks/...` request: the `op` of a decision event
/// and of the server's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Operation {
    /// `GET .../keys/{key}`.
    Get,
    /// `PUT .../keys/{key}`.
    Put,
    /// `DELETE .../keys/{key}`.
    Delete,
    /// `POST .../cas/{key}`.
    Cas,
    /// `POST .../batch`.
    Batch,
    /// `GET .../marks`.
    Marks,
}

impl Operation {
    /// Every kind.
    pub const ALL: [Operation; 6] = [
        Operation::Get,
        Operation::Put,
        Operation::Delete,
        Operation::Cas,
        Operation::Batch,
        Operation::Marks,
    ];

    /// The name, as JSON and metric labels write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Get => "get",
            Operation::Put => "put",
            Operation::Delete => "delete",
            Operation::Cas => "cas",
            Operation::Batch => "batch",
            Operation::Marks => "marks",
        }
    }

    /// Whether the request writes (needs an exclusive sequencer).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Operation::Put | Operation::Delete | Operation::Cas | Operation::Batch
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(value: T) -> String {
        serde_json::to_value(value)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_wire_names_are_cores() {
        for mode in [Mode::Exclusive, Mode::Shared] {
            assert_eq!(json(ModeName::from(mode)), mode.as_str());
            assert_eq!(Mode::from(ModeName::from(mode)), mode);
        }
        for result in OpResult::ALL {
            assert_eq!(json(OpResultName::from(result)), result.as_str());
            assert_eq!(OpResult::from(OpResultName::from(result)), result);
        }
        for operation in Operation::ALL {
            assert_eq!(json(operation), operation.as_str());
        }
    }
}
