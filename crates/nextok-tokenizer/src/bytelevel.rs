//! GPT-2's byte-level alphabet: every byte is spelled by one printable character, so that a
//! vocabulary of strings can hold any byte sequence. Printable Latin-1 bytes stand for
//! themselves; the other 68 bytes (controls, space, and a few more) are moved to U+0100 and up,
//! in byte order (space becomes `Ġ` U+0120, newline `Ċ` U+010A).

/// The character that spells each byte.
pub(crate) fn byte_to_char(byte: u8) -> char {
    BYTE_TO_CHAR[byte as usize]
}

/// The byte a character spells, if it is one of the 256 characters of the alphabet.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let code = c as u32;
    if code < 0x100 {
        let b = code as u8;
        return is_self(b).then_some(b);
    }
    // The moved bytes are numbered from U+0100 in byte order.
    let n = code.checked_sub(0x100)?;
    MOVED.get(n as usize).copied()
}

/// Whether a byte is spelled by the character with the same code.
const fn is_self(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

const fn moved() -> [u8; 68] {
    let mut out = [0u8; 68];
    let mut n = 0;
    let mut b = 0usize;
    while b < 256 {
        if !is_self(b as u8) {
            out[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    out
}

const MOVED: [u8; 68] = moved();

const fn table() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    let mut b = 0usize;
    while b < 256 {
        out[b] = if is_self(b as u8) {
            b as u8 as char
        } else {
            let c = match char::from_u32(0x100 + n) {
                Some(c) => c,
                None => '\0',
            };
            n += 1;
            c
        };
        b += 1;
    }
    out
}

const BYTE_TO_CHAR: [char; 256] = table();

/// Decodes a byte-level token text into its bytes. Characters outside the alphabet (which real
/// byte-level vocabularies do not contain) keep their UTF-8 bytes.
pub(crate) fn decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_characters() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'\t'), 'ĉ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xAD), 'Ń');
    }

    #[test]
    fn round_trip_every_byte() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "byte {b} maps to a character used twice");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
    }
}
