//! The text form of Palisade's two-column files (a key ring, a server's
//! token table): one entry per line, two words each, with `#` comments and
//! blank lines ignored.

/// The entries of a two-column text: for each line that is neither blank
/// nor a `#` comment, its 1-based number and its two words, or
/// `Err(line number)` when it does not have exactly two.
///
/// ```
/// let text = "# id secret\nk1 00ff\n\nk2 0a0b extra\n";
/// let lines: Vec<_> = palisade_core::two_columns(text).collect();
/// assert_eq!(lines, [Ok((2, "k1", "00ff")), Err(4)]);
/// ```
pub fn two_columns(text: &str) -> impl Iterator<Item = Result<(usize, &str, &str), usize>> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(number, line)| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(first), Some(second), None) => Ok((number, first, second)),
                _ => Err(number),
            }
        })
}
