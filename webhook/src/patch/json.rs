//! JSON text written straight into a byte buffer, escaped exactly as `serde_json` escapes it.
//!
//! The patch is a few dozen short strings: through a serde `Serializer`, each costs a trip
//! through the formatter and an escape loop that looks up every byte. Here a string without
//! anything to escape (nearly all of them: keys, paths, names) is copied in one piece.

/// What `serde_json` writes for each byte: 0 for the byte itself, `u` for `\u00XX`, anything
/// else for a backslash and that character.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0A] = b'n';
    table[0x0C] = b'f';
    table[0x0D] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `text` as a JSON string, quotes included.
pub fn string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    escaped(out, text);
    out.push(b'"');
}

/// Appends the inside of a JSON string holding `text`: escaped, without quotes.
pub fn escaped(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    // Eight bytes at a time up to the first word that may need an escape: most text has none,
    // and is then copied whole.
    let mut clean = 0;
    while let Some(word) = bytes.get(clean..clean + 8) {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        if needs_escape(word) {
            break;
        }
        clean += 8;
    }
    let mut copied = 0;
    for (at, &byte) in bytes.iter().enumerate().skip(clean) {
        let escape = ESCAPE[usize::from(byte)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[copied..at]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xF)]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        copied = at + 1;
    }
    out.extend_from_slice(&bytes[copied..]);
}

/// Whether any of the eight bytes of `word` is below 0x20, `"` or `\\`. Each test is exact
/// for "any byte" (the classic zero-byte test: a borrow can only start at a byte that matches).
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    below_space | zero(quote) | zero(backslash) != 0
}

/// Appends `number` in decimal.
pub fn integer(out: &mut Vec<u8>, number: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(number).as_bytes());
}

/// Appends `"key":`.
pub fn key(out: &mut Vec<u8>, key: &str) {
    string(out, key);
    out.push(b':');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(text: &str) -> String {
        let mut out = Vec::new();
        string(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_ascii_character_is_written_as_serde_json_writes_it() {
        for byte in 0u8..=0x7F {
            let text = char::from(byte).to_string();
            assert_eq!(
                written(&text),
                serde_json::to_string(&text).unwrap(),
                "byte {byte:#04x}"
            );
        }
    }

    #[test]
    fn integers_are_written_in_full() {
        for number in [0, -1, 300, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            integer(&mut out, number);
            assert_eq!(out, number.to_string().into_bytes());
        }
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(text in any::<String>()) {
            prop_assert_eq!(written(&text), serde_json::to_string(&text).unwrap());
        }

        #[test]
        fn a_word_needs_escaping_exactly_when_one_of_its_bytes_does(word in any::<[u8; 8]>()) {
            let expected = word.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            prop_assert_eq!(needs_escape(u64::from_le_bytes(word)), expected);
        }

        #[test]
        fn escapes_among_plain_text_are_written_as_serde_json_writes_them(
            text in "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é/~]{0,40}"
        ) {
            prop_assert_eq!(written(&text), serde_json::to_string(&text).unwrap());
        }
    }
}
