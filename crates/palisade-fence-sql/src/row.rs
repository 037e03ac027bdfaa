//! Per-row fencing, for tables that carry their own `fence_generation`.
//!
//! The optimistic-version pattern: each row remembers the generation of
//! the holder that last wrote it, and an update only matches a row whose
//! generation is not newer than the writer's. It fences one row, not a
//! whole lock, and needs no marks table; it does not stop a stale holder
//! from *inserting* rows, which is what the lock-wide fence is for.

use crate::FenceError;

/// A fenced update of one row:
///
/// ```sql
/// UPDATE {table} SET {column} = <value>, ..., fence_generation = <g>
///  WHERE {key_column} = <key> AND fence_generation <= <g>
/// ```
///
/// Table and column names must be plain identifiers (checked: they are
/// spliced into the SQL); key and values are bound parameters (text).
#[derive(Debug, Clone, Copy)]
pub struct RowUpdate<'a> {
    /// The table, which has a `fence_generation BIGINT NOT NULL` column.
    pub table: &'a str,
    /// The key column (`WHERE {key_column} = key`).
    pub key_column: &'a str,
    /// The row's key.
    pub key: &'a str,
    /// `(column, value)` pairs to set, besides `fence_generation`.
    pub set: &'a [(&'a str, &'a str)],
}

/// A [`RowUpdate`] whose identifiers were checked.
#[doc(hidden)]
#[derive(Debug)]
pub struct ValidRowUpdate<'a> {
    pub(crate) table: &'a str,
    key_column: &'a str,
    pub(crate) key: &'a str,
    columns: Vec<&'a str>,
    pub(crate) values: Vec<&'a str>,
}

impl<'a> RowUpdate<'a> {
    pub(crate) fn validate(&self) -> Result<ValidRowUpdate<'a>, FenceError> {
        check_identifier(self.table)?;
        check_identifier(self.key_column)?;
        for (column, _) in self.set {
            check_identifier(column)?;
        }
        Ok(ValidRowUpdate {
            table: self.table,
            key_column: self.key_column,
            key: self.key,
            columns: self.set.iter().map(|(column, _)| *column).collect(),
            values: self.set.iter().map(|(_, value)| *value).collect(),
        })
    }
}

impl ValidRowUpdate<'_> {
    /// The UPDATE, with `$n` placeholders (PostgreSQL: values, generation,
    /// key) or `?` (MySQL: values, generation, key, generation).
    pub(crate) fn update_sql(&self, numbered: bool) -> String {
        let n = self.columns.len();
        let param = |i: usize| {
            if numbered {
                format!("${}", i + 1)
            } else {
                "?".to_owned()
            }
        };
        let mut sets: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, column)| format!("{column} = {}", param(i)))
            .collect();
        sets.push(format!("fence_generation = {}", param(n)));
        format!(
            "UPDATE {} SET {} WHERE {} = {} AND fence_generation <= {}",
            self.table,
            sets.join(", "),
            self.key_column,
            param(n + 1),
            param(n),
        )
    }

    /// The follow-up read that tells "no such row" from "newer row".
    pub(crate) fn read_sql(&self, key_param: &str) -> String {
        format!(
            "SELECT fence_generation FROM {} WHERE {} = {key_param}",
            self.table, self.key_column
        )
    }
}

/// A plain SQL identifier: ASCII letter or `_`, then letters, digits, `_`;
/// at most 63 bytes (PostgreSQL's limit). Anything else could smuggle SQL.
fn check_identifier(name: &str) -> Result<(), FenceError> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(FenceError::BadIdentifier {
            name: name.chars().take(64).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_that_could_carry_sql_are_refused() {
        for bad in ["", "1t", "t; DROP TABLE x", "t\"", "a b", &"x".repeat(64)] {
            assert!(check_identifier(bad).is_err(), "{bad:?}");
        }
        for good in ["t", "_t", "accounts_2", &"x".repeat(63)] {
            assert!(check_identifier(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn the_update_statement_binds_in_the_documented_order() {
        let update = RowUpdate {
            table: "accounts",
            key_column: "id",
            key: "k",
            set: &[("balance", "1"), ("note", "n")],
        }
        .validate()
        .unwrap();
        assert_eq!(
            update.update_sql(true),
            "UPDATE accounts SET balance = $1, note = $2, fence_generation = $3 \
             WHERE id = $4 AND fence_generation <= $3"
        );
        assert_eq!(
            update.update_sql(false),
            "UPDATE accounts SET balance = ?, note = ?, fence_generation = ? \
             WHERE id = ? AND fence_generation <= ?"
        );
    }
}
