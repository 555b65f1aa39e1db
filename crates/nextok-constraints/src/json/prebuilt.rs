//! Automata built ahead of time and kept in the crate, so that the first schema of a process
//! that needs one does not pay for its determinization: the regular `format`s (`formats.dfa`;
//! `iri-reference` takes some 29 ms to build and `hostname` 17 ms, where reading a table back
//! takes a fraction of a millisecond) and the operands of `format: "regex"`'s pieces
//! (`regex.dfa`; some 150 ms to build).
//!
//! Each file holds names and their automata as [`Dfa::to_bytes`] writes them. A test
//! (`prebuilt_automata_are_fresh_builds`) builds every one again and compares;
//! `NEXTOK_WRITE_PREBUILT=1` makes it write the files from those builds instead, after a change
//! to an expression or to the automaton code.

use crate::dfa::Dfa;

/// The first bytes of the file, with the version of its layout.
const MAGIC: &[u8] = b"nextok-automata-1\n";

/// The formats' tables, as [`encode`] wrote them.
const FORMAT_TABLES: &[u8] = include_bytes!("formats.dfa");

/// The tables of `format: "regex"`'s operands (`ecma_regex::OPERANDS`).
const REGEX_TABLES: &[u8] = include_bytes!("regex.dfa");

/// The formats whose automata are kept: every one that `string::format_regex` knows.
#[cfg(test)]
pub(super) const FORMATS: [&str; 16] = [
    "date",
    "time",
    "date-time",
    "duration",
    "email",
    "hostname",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uri-template",
    "relative-json-pointer",
    "uuid",
    "ipv4",
    "ipv6",
    "json-pointer",
];

/// The kept automaton of `format`, if the file has one (and reads back whole).
pub(super) fn format(name: &str) -> Option<Dfa> {
    find(FORMAT_TABLES, name)
}

/// The kept automaton of `format: "regex"`'s operand `name`.
pub(super) fn regex_operand(name: &str) -> Option<Dfa> {
    find(REGEX_TABLES, name)
}

/// The automaton under `name` in a file's bytes, if it has one that reads back whole.
fn find(file: &[u8], name: &str) -> Option<Dfa> {
    entries(file)?
        .find(|(n, _)| *n == name.as_bytes())
        .and_then(|(_, table)| Dfa::from_bytes(table))
}

/// The file's entries, name and table, or `None` when it does not start as [`encode`] writes.
fn entries(bytes: &[u8]) -> Option<impl Iterator<Item = (&[u8], &[u8])>> {
    let mut rest = bytes.strip_prefix(MAGIC)?;
    Some(std::iter::from_fn(move || {
        let (&n, r) = rest.split_first()?;
        let (name, r) = r.split_at_checked(n as usize)?;
        let (len, r) = r.split_at_checked(4)?;
        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let (table, r) = r.split_at_checked(len)?;
        rest = r;
        Some((name, table))
    }))
}

/// The file's bytes for these formats and automata.
#[cfg(test)]
pub(super) fn encode(formats: &[(&str, Dfa)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for (name, d) in formats {
        let table = d.to_bytes();
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(table.len() as u32).to_le_bytes());
        out.extend_from_slice(&table);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::string::build_format_dfa;

    /// Every kept automaton is the one its expression builds now, and each file is exactly
    /// what these builds write. With `NEXTOK_WRITE_PREBUILT=1` the files are written from the
    /// builds instead (then run again without it).
    #[test]
    fn prebuilt_automata_are_fresh_builds() {
        use crate::json::ecma_regex::{build_operand, OPERANDS};
        let formats: Vec<(&str, Dfa)> = FORMATS
            .iter()
            .map(|&f| {
                (
                    f,
                    build_format_dfa(f, "#").expect("every listed format builds"),
                )
            })
            .collect();
        let operands: Vec<(&str, Dfa)> = OPERANDS
            .iter()
            .map(|&o| (o, build_operand(o).expect("every operand builds")))
            .collect();
        let files = [
            ("formats.dfa", FORMAT_TABLES, &formats),
            ("regex.dfa", REGEX_TABLES, &operands),
        ];
        if std::env::var_os("NEXTOK_WRITE_PREBUILT").is_some() {
            for (file, _, fresh) in files {
                let path = format!("{}/src/json/{file}", env!("CARGO_MANIFEST_DIR"));
                std::fs::write(path, encode(fresh)).expect("writes the tables");
            }
            return;
        }
        for (file, kept, fresh) in files {
            for (name, d) in fresh {
                let k = find(kept, name).unwrap_or_else(|| panic!("{file}: {name} is kept"));
                assert!(k == *d, "{file}: {name} differs from a fresh build");
            }
            assert!(
                kept == encode(fresh).as_slice(),
                "{file} is not what the builds write (NEXTOK_WRITE_PREBUILT=1 rewrites it)"
            );
        }
        assert!(format("url").is_none() && format("").is_none());
        assert!(regex_operand("run").is_some() && regex_operand("uri").is_none());
    }

    /// A table read back is the automaton written, and damaged bytes read as `None`, never as
    /// another automaton or a panic.
    #[test]
    fn tables_read_back_and_refuse_damage() {
        let samples = [
            Dfa::from_regex("[0-9]{2,4}-(a|bc)*").unwrap(),
            Dfa::from_regex("(?s:.)*é").unwrap(),
            Dfa::empty(),
            Dfa::literal(b""),
        ];
        for d in &samples {
            let bytes = d.to_bytes();
            assert!(Dfa::from_bytes(&bytes).as_ref() == Some(d));
            // Cut short anywhere, or with a byte more: refused.
            for n in 0..bytes.len() {
                assert!(Dfa::from_bytes(&bytes[..n]).is_none(), "prefix of {n}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Dfa::from_bytes(&longer).is_none());
            // Any one byte changed: refused, or (where the change still reads as a table, such as
            // another accepting state) a different automaton; never the same one, never a panic.
            for i in 0..bytes.len() {
                for x in [1u8, 0x80, 0xff] {
                    let mut bad = bytes.clone();
                    bad[i] ^= x;
                    if let Some(e) = Dfa::from_bytes(&bad) {
                        assert!(e != *d, "byte {i} ^ {x:#x} read as the same automaton");
                    }
                }
            }
        }
        // A file cut short lists only whole entries.
        let file = encode(&[("a", samples[0].clone()), ("b", samples[1].clone())]);
        for n in 0..file.len() {
            let names: Vec<&[u8]> = entries(&file[..n])
                .map(|e| e.map(|(name, _)| name).collect())
                .unwrap_or_default();
            assert!(
                names.len() <= 2 && (names.len() < 2 || n == file.len()),
                "{n}"
            );
        }
    }
}
