//! Loading the library, idempotently, on every primary: absent, it is
//! loaded; this crate's, it is kept; anything else is refused, never
//! silently replaced (an older Palisade version only with the upgrade
//! option).

use redis::{Cmd, Value};

use crate::connection::FenceConnection;
use crate::library::{Found, LIBRARY_NAME, LIBRARY_SOURCE, LIBRARY_VERSION, judge};
use crate::{RedisFenceError, error::from_redis};

/// Where a load goes: a node by name, or the primary of a slot.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    Node(&'a str),
    Slot(u16),
}

/// What happened on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Installed {
    /// This crate's library was already there.
    Present,
    /// It was loaded now (absent before, or an older version replaced).
    Loaded,
}

async fn send(
    connection: &FenceConnection,
    target: Target<'_>,
    command: &Cmd,
) -> redis::RedisResult<Value> {
    match target {
        Target::Node(node) => connection.on_node(node, command).await,
        Target::Slot(slot) => connection.on_slot(slot, command).await,
    }
}

fn list_command() -> Cmd {
    let mut list = redis::cmd("FUNCTION");
    list.arg("LIST")
        .arg("LIBRARYNAME")
        .arg(LIBRARY_NAME)
        .arg("WITHCODE");
    list
}

fn load_command(replace: bool) -> Cmd {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD");
    if replace {
        load.arg("REPLACE");
    }
    load.arg(LIBRARY_SOURCE);
    load
}

/// The code of the library named exactly `palisade_fence` in a `FUNCTION
/// LIST ... WITHCODE` answer (RESP2 flat pairs or RESP3 maps).
pub(crate) fn library_code(list: &Value) -> Result<Option<String>, RedisFenceError> {
    let Value::Array(libraries) = list else {
        return Err(RedisFenceError::Protocol(format!(
            "FUNCTION LIST answered {list:?}"
        )));
    };
    for library in libraries {
        let pairs: Vec<(&Value, &Value)> = match library {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|pair| Some((pair.first()?, pair.get(1)?)))
                .collect(),
            Value::Map(items) => items.iter().map(|(key, value)| (key, value)).collect(),
            other => {
                return Err(RedisFenceError::Protocol(format!(
                    "FUNCTION LIST entry {other:?}"
                )));
            }
        };
        let field = |name: &str| {
            pairs.iter().find_map(|(key, value)| {
                (text(key).as_deref() == Some(name))
                    .then(|| text(value))
                    .flatten()
            })
        };
        if field("library_name").as_deref() == Some(LIBRARY_NAME) {
            return Ok(field("library_code"));
        }
    }
    Ok(None)
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// Makes sure `target` runs this crate's library.
pub(crate) async fn ensure_on(
    connection: &FenceConnection,
    target: Target<'_>,
    node: &str,
    upgrade: bool,
) -> Result<Installed, RedisFenceError> {
    // Two rounds: a load can lose a race against another client's.
    for _ in 0..2 {
        let list = send(connection, target, &list_command())
            .await
            .map_err(|error| from_redis("function list", error))?;
        let found = match library_code(&list)? {
            None => None,
            Some(code) => match judge(&code) {
                Ok(()) => return Ok(Installed::Present),
                Err(found) => Some(found),
            },
        };
        let replace = match found {
            None => false,
            Some(Found::Older(_)) if upgrade => true,
            Some(found) => {
                return Err(RedisFenceError::Library {
                    node: node.to_owned(),
                    found,
                    ours: LIBRARY_VERSION,
                });
            }
        };
        match send(connection, target, &load_command(replace)).await {
            Ok(_) => {
                tracing::info!(
                    target: crate::TRACE_TARGET,
                    node,
                    version = LIBRARY_VERSION,
                    replaced = ?found,
                    "loaded the palisade_fence library"
                );
                return Ok(Installed::Loaded);
            }
            // Another client loaded it first: look again. (A function
            // name taken by another library fails below.)
            Err(error)
                if !replace
                    && error
                        .to_string()
                        .contains(&format!("Library '{LIBRARY_NAME}' already exists")) => {}
            Err(error) => return Err(from_redis("function load", error)),
        }
    }
    Err(RedisFenceError::Protocol(format!(
        "the palisade_fence library on {node} changed while it was being loaded"
    )))
}

/// Makes sure every primary runs this crate's library; how many loaded it
/// now.
pub(crate) async fn ensure_everywhere(
    connection: &FenceConnection,
    upgrade: bool,
) -> Result<usize, RedisFenceError> {
    let nodes = connection
        .on_every_primary(&redis::cmd("PING"))
        .await
        .map_err(|error| from_redis("list primaries", error))?;
    let mut loaded = 0;
    for (node, _) in nodes {
        if ensure_on(connection, Target::Node(&node), &node, upgrade).await? == Installed::Loaded {
            loaded += 1;
        }
    }
    Ok(loaded)
}

/// The module's command (crate `palisade-fence-redis-module`).
pub(crate) const MODULE_COMMAND: &str = "PALISADE.FENCE";

/// Whether every primary has the module loaded (`COMMAND INFO
/// palisade.fence` names the command): only then do fenced calls use it,
/// so all of a cluster's slots answer alike. Managed Redis services load
/// no modules; they get the function.
pub(crate) async fn module_everywhere(
    connection: &FenceConnection,
) -> Result<bool, RedisFenceError> {
    let mut info = redis::cmd("COMMAND");
    info.arg("INFO").arg(MODULE_COMMAND);
    let nodes = connection
        .on_every_primary(&info)
        .await
        .map_err(|error| from_redis("look for the module", error))?;
    let mut everywhere = !nodes.is_empty();
    for (node, answer) in nodes {
        let answer = answer.map_err(|error| from_redis("look for the module", error))?;
        let present = matches!(&answer, Value::Array(entries) if matches!(entries.first(), Some(Value::Array(_))));
        tracing::debug!(target: crate::TRACE_TARGET, node, present, "the {MODULE_COMMAND} module");
        everywhere &= present;
    }
    Ok(everywhere)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn the_library_is_found_by_its_exact_name() {
        let entry = |name: &str, code: &str| {
            Value::Array(vec![
                bulk("library_name"),
                bulk(name),
                bulk("engine"),
                bulk("LUA"),
                bulk("functions"),
                Value::Array(vec![]),
                bulk("library_code"),
                bulk(code),
            ])
        };
        let list = Value::Array(vec![
            entry("palisade_fence2", "other"),
            entry(LIBRARY_NAME, "ours"),
        ]);
        assert_eq!(library_code(&list).unwrap().as_deref(), Some("ours"));
        assert_eq!(library_code(&Value::Array(vec![])).unwrap(), None);
        assert!(library_code(&Value::Nil).is_err());
    }
}
