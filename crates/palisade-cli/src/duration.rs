//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, `1.5s`; a
//! bare number is seconds.

use std::time::Duration;

/// Parses a duration flag (a clap `value_parser`).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds_per_unit = match unit.trim() {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`; use ms, s, m or h (e.g. 500ms, 10s)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 500ms, 10s, 2m)"))?;
    Duration::try_from_secs_f64(value * seconds_per_unit)
        .map_err(|_| format!("`{text}` is out of range"))
}

/// A duration as people write it: `1.5 s`, `250 ms`, `10 s`.
pub(crate) fn human(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
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
    fn units() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("10", Duration::from_secs(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("0", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn nonsense_is_refused_with_a_hint() {
        for text in ["", "s", "ten", "10 parsecs", "-1s", "1e400"] {
            let error = parse(text).expect_err(text);
            assert!(error.contains(text.trim()), "{error}");
        }
    }

    #[test]
    fn human_form() {
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
        assert_eq!(human(Duration::from_secs(10)), "10 s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
    }
}
