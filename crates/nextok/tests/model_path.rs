//! The default model's path rule (the fetch itself is the command's: `nextok-cli`, `src/fetch.rs`).

use nextok::{default_model_path_from, Error};
use std::path::Path;

#[test]
fn the_path_rule_matches_xtask() {
    let some = |s: &str| Some(s.into());
    assert_eq!(
        default_model_path_from(some("/m/x.gguf"), some("/xdg"), some("/home/u")).unwrap(),
        Path::new("/m/x.gguf")
    );
    assert_eq!(
        default_model_path_from(None, some("/xdg"), some("/home/u")).unwrap(),
        Path::new("/xdg/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    // An empty XDG_CACHE_HOME counts as unset, as the XDG specification asks.
    assert_eq!(
        default_model_path_from(None, some(""), some("/home/u")).unwrap(),
        Path::new("/home/u/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    assert_eq!(
        default_model_path_from(None, None, None),
        Err(Error::NoCacheDir)
    );
}

#[test]
fn an_empty_nextok_model_is_an_error_not_the_default() {
    // `NEXTOK_MODEL= cargo test` would otherwise run on whatever file the cache holds.
    let err = default_model_path_from(Some("".into()), Some("/xdg".into()), None).unwrap_err();
    assert_eq!(err, Error::EmptyNextokModel);
    let message = err.to_string();
    assert!(
        message.contains("NEXTOK_MODEL") && message.contains("empty"),
        "{message}"
    );
}

#[test]
fn the_default_model_constants_name_one_file() {
    // The digest is 64 lower-case hexadecimal digits, and the path rule ends in the file name.
    assert_eq!(nextok::DEFAULT_MODEL_SHA256.len(), 64);
    assert!(nextok::DEFAULT_MODEL_SHA256
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    let path = default_model_path_from(None, Some("/c".into()), None).unwrap();
    assert_eq!(
        path.file_name().unwrap().to_str().unwrap(),
        nextok::DEFAULT_MODEL_FILE
    );
    assert!(
        nextok::DEFAULT_MODEL_PACKAGE.contains("=="),
        "a pinned version"
    );
}
