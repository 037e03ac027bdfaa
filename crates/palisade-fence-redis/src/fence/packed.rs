//! The module's answers (protocol 4): one string per call, a line per
//! request, read here into the same [`Answer`]s the function's arrays
//! give (see `palisade-fence-redis-module`, `Out`, for the grammar). One
//! string costs the client one allocation where an array of arrays costs
//! one per value.

use redis::Value;

use super::{Answer, Answered};
use crate::RedisFenceError;
use palisade_core::marks::Marks;

/// The `count` answers of one call.
pub(super) fn answers(value: &Value, count: usize) -> Result<Vec<Answered>, RedisFenceError> {
    let unexpected = || {
        RedisFenceError::Protocol(format!(
            "PALISADE.FENCE answered {value:?} to {count} requests"
        ))
    };
    let Value::BulkString(text) = value else {
        return Err(unexpected());
    };
    let mut reader = Reader { rest: text };
    let answers = (0..count)
        .map(|_| reader.answer())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(unexpected)?;
    if !reader.rest.is_empty() {
        return Err(unexpected());
    }
    Ok(answers)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.rest = self.rest.strip_prefix(&[byte])?;
        Some(())
    }

    /// The text up to the next space or line end (not taken).
    fn word(&mut self) -> Option<&'a [u8]> {
        let end = self
            .rest
            .iter()
            .position(|byte| matches!(byte, b' ' | b'\n'))?;
        let (word, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(word)
    }

    fn next<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.expect(b' ')?;
        std::str::from_utf8(self.word()?).ok()?.parse().ok()
    }

    /// `length ":" bytes`.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let colon = self.rest.iter().position(|byte| *byte == b':')?;
        let len: usize = std::str::from_utf8(&self.rest[..colon])
            .ok()?
            .parse()
            .ok()?;
        let end = (colon + 1).checked_add(len)?;
        let bytes = self.rest.get(colon + 1..end)?;
        self.rest = &self.rest[end..];
        Some(bytes)
    }

    fn marks(&mut self) -> Option<Marks> {
        Some(Marks {
            exclusive: self.next()?,
            shared: self.next()?,
        })
    }

    fn result(&mut self) -> Option<Value> {
        self.expect(b' ')?;
        let (kind, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(match kind {
            b':' => Value::Int(std::str::from_utf8(self.word()?).ok()?.parse().ok()?),
            b'$' => Value::BulkString(self.bytes()?.to_vec()),
            b'_' => Value::Nil,
            _ => return None,
        })
    }

    /// One line; `None` if it is malformed.
    fn answer(&mut self) -> Option<Answered> {
        let status = self.word()?;
        let answer = match status {
            b"ok" => {
                let marks = self.marks()?;
                let seq = self.next()?;
                let restored = self.next::<u8>()? == 1;
                let mut results = super::Results::new();
                while self.rest.first() == Some(&b' ') {
                    results.push(self.result()?);
                }
                Ok(Answer::Ok {
                    marks,
                    seq,
                    restored,
                    results,
                })
            }
            b"stale" => Ok(Answer::Stale {
                marks: self.marks()?,
                restored: self.next::<u8>()? == 1,
            }),
            b"short" => Ok(Answer::Short {
                op_index: self.next()?,
                current: self.next()?,
            }),
            b"shared_on_write" => Ok(Answer::SharedOnWrite),
            b"wrongtype" => Err(RedisFenceError::WrongType {
                op_index: self.next()?,
            }),
            b"notinteger" => Err(RedisFenceError::NotInteger {
                op_index: self.next()?,
            }),
            b"error" => {
                self.expect(b' ')?;
                Err(RedisFenceError::Protocol(
                    String::from_utf8_lossy(self.bytes()?).into_owned(),
                ))
            }
            _ => return None,
        };
        self.expect(b'\n')?;
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, count: usize) -> Result<Vec<Answered>, RedisFenceError> {
        answers(&Value::BulkString(text.as_bytes().to_vec()), count)
    }

    #[test]
    fn every_kind_of_answer_is_read() {
        let answers = read(
            "ok 7 0 12 0 :41 $7:created _ $3:a\nb\nstale 9 2 1\nshort 0 3\nshared_on_write\nwrongtype 1\nerror 13:PALISADE oops\n",
            6,
        )
        .unwrap();
        match &answers[0] {
            Ok(Answer::Ok {
                marks,
                seq,
                restored,
                results,
            }) => {
                assert_eq!(
                    (marks.exclusive, marks.shared, *seq, *restored),
                    (7, 0, 12, false)
                );
                assert_eq!(
                    &results[..],
                    &[
                        Value::Int(41),
                        Value::BulkString(b"created".to_vec()),
                        Value::Nil,
                        Value::BulkString(b"a\nb".to_vec())
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            answers[1],
            Ok(Answer::Stale {
                marks: Marks {
                    exclusive: 9,
                    shared: 2
                },
                restored: true
            })
        ));
        assert!(matches!(
            answers[2],
            Ok(Answer::Short {
                op_index: 0,
                current: 3
            })
        ));
        assert!(matches!(answers[3], Ok(Answer::SharedOnWrite)));
        assert!(matches!(
            answers[4],
            Err(RedisFenceError::WrongType { op_index: 1 })
        ));
        assert!(
            matches!(&answers[5], Err(RedisFenceError::Protocol(message)) if message == "PALISADE oops")
        );
    }

    #[test]
    fn a_malformed_or_short_answer_is_a_protocol_error() {
        for (text, count) in [
            ("ok 7 0 12 0 :41\n", 2),
            ("ok 7 0 12 0 :41\nextra", 1),
            ("ok 7 0 12 0 $9:short\n", 1),
            ("ok 7 0\n", 1),
            ("maybe\n", 1),
        ] {
            assert!(
                matches!(read(text, count), Err(RedisFenceError::Protocol(_))),
                "{text:?}"
            );
        }
    }
}
