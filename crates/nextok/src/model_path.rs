//! Where the default model lives. The file may not be there yet: the `nextok` command fetches it
//! on first use (`nextok-cli`, `src/fetch.rs`), and `cargo xtask fetch-model` runs that fetch.

use crate::default_model::{model_path_rule, NoModelPath};
use crate::error::Error;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The default model's path: `$NEXTOK_MODEL` if set, else
/// `$XDG_CACHE_HOME/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf`, else the same under
/// `~/.cache`. The same rule as `cargo xtask fetch-model` (both compile one file).
///
/// The file may not exist yet; the `nextok` command fetches it on first use. An empty
/// `$NEXTOK_MODEL` is an error ([`Error::EmptyNextokModel`]), not the default.
pub fn default_model_path() -> Result<PathBuf, Error> {
    default_model_path_from(
        std::env::var_os("NEXTOK_MODEL"),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`default_model_path`] with the environment given, so that the rule can be tested without
/// changing the process's environment.
pub fn default_model_path_from(
    nextok_model: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, Error> {
    model_path_rule(nextok_model, xdg_cache_home, home).map_err(|e| match e {
        NoModelPath::EmptyNextokModel => Error::EmptyNextokModel,
        NoModelPath::NoCacheDir => Error::NoCacheDir,
    })
}

/// Checks that `path` names a regular file (following symbolic links), so that a model is never
/// read from a FIFO (which would block), a device (`/dev/zero` never ends) or a socket. A path
/// that does not exist is [`Error::ModelNotFound`], a folder [`Error::UnsupportedModelFormat`],
/// anything else [`Error::ModelNotARegularFile`] with what it is.
pub fn check_model_file(path: &Path) -> Result<(), Error> {
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::ModelNotFound {
                path: path.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(Error::Io {
                action: "read",
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        }
    };
    if metadata.is_file() {
        return Ok(());
    }
    if metadata.is_dir() {
        return Err(Error::UnsupportedModelFormat {
            path: path.to_path_buf(),
            reason: "a folder (safetensors checkpoints are not supported yet)",
        });
    }
    Err(Error::ModelNotARegularFile {
        path: path.to_path_buf(),
        kind: nextok_gguf::file_kind(&metadata.file_type()),
    })
}
