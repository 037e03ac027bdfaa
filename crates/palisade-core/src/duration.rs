//! Durations as people write them, one grammar for every flag, setting and
//! URL parameter: a number and a unit, `500ms`, `10s`, `2m`, `1h`, or a sum
//! of them, `1m 30s` ([`humantime`]'s grammar). A bare number is refused:
//! `10` could mean seconds or milliseconds, and a lease or timeout guessed
//! wrong by a thousand times is a safety hazard, not a typo.

use std::time::Duration;

/// Parses a duration: `500ms`, `10s`, `2m`, `1h`, `1m 30s`.
///
/// The error says what was wrong and shows the grammar, fit for a clap
/// `value_parser` or a configuration error.
///
/// ```
/// use std::time::Duration;
/// use palisade_core::parse_duration;
///
/// assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
/// assert!(parse_duration("10").unwrap_err().contains("unit"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!(
            "`{text}` has no unit; write a number and a unit, e.g. `{text}s` or `{text}ms`"
        ));
    }
    humantime::parse_duration(text).map_err(|error| {
        format!(
            "`{}` is not a duration ({error}); write e.g. 500ms, 10s, 2m, 1h or 1m 30s",
            crate::clip(text)
        )
    })
}

/// A duration as people read it: `250 ms`, `10 s`, `1.5 s`, `2 min`.
///
/// ```
/// use std::time::Duration;
/// use palisade_core::format_duration;
///
/// assert_eq!(format_duration(Duration::from_millis(250)), "250 ms");
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1.5 s");
/// assert_eq!(format_duration(Duration::from_secs(120)), "2 min");
/// ```
pub fn format_duration(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else if duration >= Duration::from_secs(60)
        && duration.as_secs() % 60 == 0
        && duration.subsec_nanos() == 0
    {
        format!("{} min", duration.as_secs() / 60)
    } else if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        let good = [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1m 30s", Duration::from_secs(90)),
            (" 90s ", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
        ];
        for (text, expected) in good {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        for bad in [
            "",
            "10",
            "h",
            "-1h",
            "1.5.5s",
            "10 parsecs",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
