//! Reading the files a person names on the command line (a JSON Schema, a grammar, a
//! conversation, a folder of benchmark cases): only regular files, and only up to a size.
//!
//! A FIFO would block the read until something writes to it, a device such as `/dev/zero` never
//! ends, and a huge file would be read whole into memory; each is refused with a message that
//! names the file and says what it is. A symbolic link is followed, so a link to a regular file
//! is read and a link to a device is refused.

use nextok::gguf::file_kind;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest schema, grammar or conversation file read whole: 16 MiB, far beyond any real one
/// (the largest JSON Schema in MaskBench is under 1 MiB).
pub const MAX_TEXT_FILE_BYTES: u64 = 16 << 20;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The operating system refused (no such file, no permission ...).
    #[error("cannot read {path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// The path names something other than a regular file.
    #[error("cannot read {path}: it is {kind}, not a regular file; give the {what} as a file")]
    NotARegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is (`a FIFO`, `a character device` ...).
        kind: &'static str,
        /// What the file was to hold (`JSON Schema`, `grammar` ...).
        what: &'static str,
    },
    /// The file is larger than [`MAX_TEXT_FILE_BYTES`].
    #[error("{path} is {size} bytes, more than the {limit} bytes a {what} file may have")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least; a file that grows while read is cut at the limit + 1).
        size: u64,
        /// The limit.
        limit: u64,
        /// What the file was to hold.
        what: &'static str,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is not UTF-8 text; give the {what} as a text file")]
    NotText {
        /// The file.
        path: PathBuf,
        /// What the file was to hold.
        what: &'static str,
    },
}

/// Checks that `path` is a regular file of at most `limit` bytes (following links), without
/// opening it: a FIFO is never opened, since opening one blocks.
pub fn check_regular(path: &Path, what: &'static str, limit: u64) -> Result<u64, FileError> {
    let io = |e: std::io::Error| FileError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(FileError::NotARegularFile {
            path: path.to_path_buf(),
            kind: file_kind(&meta.file_type()),
            what,
        });
    }
    if meta.len() > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
            what,
        });
    }
    Ok(meta.len())
}

/// Reads a whole text file of at most [`MAX_TEXT_FILE_BYTES`]; `what` names its content in
/// messages (`JSON Schema`, `grammar`, `conversation`).
pub fn read_text(path: &Path, what: &'static str) -> Result<String, FileError> {
    read_text_limited(path, what, MAX_TEXT_FILE_BYTES)
}

/// [`read_text`] with the limit given.
pub fn read_text_limited(path: &Path, what: &'static str, limit: u64) -> Result<String, FileError> {
    let io = |e: std::io::Error| FileError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    check_regular(path, what, limit)?;
    let file = std::fs::File::open(path).map_err(io)?;
    // The opened file is checked again, so that a path swapped after the check cannot slip by,
    // and read through a limit, so that a file that grows while read stops at it.
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(FileError::NotARegularFile {
            path: path.to_path_buf(),
            kind: file_kind(&kind),
            what,
        });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            limit,
            what,
        });
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotText {
        path: path.to_path_buf(),
        what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nextok-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_regular_file_is_read_and_anything_else_is_named() {
        let dir = scratch("kinds");
        let file = dir.join("schema.json");
        std::fs::write(&file, "{\"type\": \"string\"}").unwrap();
        assert_eq!(
            read_text(&file, "JSON Schema").unwrap(),
            "{\"type\": \"string\"}"
        );
        let fifo = dir.join("fifo.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // Were the FIFO opened, this would block: nothing writes to it.
        assert!(matches!(
            read_text(&fifo, "JSON Schema"),
            Err(FileError::NotARegularFile { kind: "a FIFO", .. })
        ));
        let link = dir.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_text(&link, "grammar").unwrap_err();
        assert!(
            matches!(
                err,
                FileError::NotARegularFile {
                    kind: "a character device",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().ends_with(
                "it is a character device, not a regular file; give the grammar as a file"
            ),
            "{err}"
        );
        assert!(matches!(
            read_text(&dir, "grammar"),
            Err(FileError::NotARegularFile {
                kind: "a folder",
                ..
            })
        ));
        assert!(matches!(
            read_text(&dir.join("missing"), "grammar"),
            Err(FileError::Io { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_over_the_limit_is_refused_and_one_at_it_is_read() {
        let dir = scratch("size");
        let file = dir.join("g.gbnf");
        std::fs::write(&file, "x".repeat(11)).unwrap();
        let err = read_text_limited(&file, "grammar", 10).unwrap_err();
        assert!(
            matches!(
                err,
                FileError::TooLarge {
                    size: 11,
                    limit: 10,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(read_text_limited(&file, "grammar", 11).unwrap().len(), 11);
        std::fs::write(&file, [0xffu8, 0xfe]).unwrap();
        assert!(matches!(
            read_text(&file, "grammar"),
            Err(FileError::NotText { .. })
        ));
        assert_eq!(MAX_TEXT_FILE_BYTES, 16 * 1024 * 1024);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
