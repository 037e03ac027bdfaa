//! The sequencer parser: arbitrary bytes, as UTF-8, parsed as a sequencer.
//!
//! Never panics; and whatever it accepts is canonical: the `Display` form
//! is the input itself, it fits the header limit, and it parses back to an
//! equal value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_core::Sequencer;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<Sequencer>() {
        Ok(sequencer) => {
            let shown = sequencer.to_string();
            let again: Sequencer = shown
                .parse()
                .unwrap_or_else(|error| panic!("{shown:?} does not re-parse: {error}"));
            assert_eq!(again, sequencer, "{shown:?} re-parses to another value");
            assert_eq!(shown, text, "a non-canonical text was accepted");
            assert!(shown.len() <= Sequencer::MAX_TEXT_LEN, "{}", shown.len());
            assert!(shown.bytes().all(|byte| (b'!'..=b'~').contains(&byte)));
        }
        Err(error) => {
            // Errors echo clipped input: their text stays short.
            let message = error.to_string();
            assert!(message.len() < 1024, "{} bytes: {message:?}", message.len());
        }
    }
});
