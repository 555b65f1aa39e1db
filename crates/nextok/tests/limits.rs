//! The facade's bounds on counts and files from a caller (issue #13): every count is checked
//! before anything is allocated, and a model is read only from a regular file. None of these
//! needs a model: each is refused before one would be read.

use nextok::{check_model_file, BeamOptions, Engine, EngineOptions, Error, GenerateOptions};
use std::path::Path;

fn with_n(n: usize) -> GenerateOptions {
    GenerateOptions {
        n,
        ..GenerateOptions::default()
    }
}

fn with_beams(width: usize) -> GenerateOptions {
    GenerateOptions {
        beams: Some(BeamOptions {
            width,
            length_penalty: 1.0,
        }),
        ..GenerateOptions::default()
    }
}

#[test]
fn completions_are_bounded_with_the_value_in_the_error() {
    // `-n 4294967296` asked for 2^32 forks of the cache and aborted; 18446744073709551615 was a
    // capacity overflow.
    for n in [0, GenerateOptions::MAX_COMPLETIONS + 1, 1 << 32, usize::MAX] {
        assert_eq!(
            with_n(n).validate(),
            Err(Error::OutOfRange {
                option: "n",
                value: n,
                min: 1,
                max: GenerateOptions::MAX_COMPLETIONS,
            }),
            "n = {n}"
        );
    }
    assert_eq!(with_n(1).validate(), Ok(()));
    assert_eq!(with_n(GenerateOptions::MAX_COMPLETIONS).validate(), Ok(()));
    let message = with_n(1 << 32).validate().unwrap_err().to_string();
    assert_eq!(
        message,
        "invalid option `n` 4294967296: it must be between 1 and 128"
    );
}

#[test]
fn beams_are_bounded_and_n_is_at_most_the_beams() {
    for width in [0, GenerateOptions::MAX_BEAMS + 1, 1 << 32, usize::MAX] {
        assert_eq!(
            with_beams(width).validate(),
            Err(Error::OutOfRange {
                option: "beams",
                value: width,
                min: 1,
                max: GenerateOptions::MAX_BEAMS,
            }),
            "width = {width}"
        );
    }
    assert_eq!(with_beams(GenerateOptions::MAX_BEAMS).validate(), Ok(()));
    let mut three_of_two = with_beams(2);
    three_of_two.n = 3;
    assert!(matches!(
        three_of_two.validate(),
        Err(Error::InvalidOption { option: "n", .. })
    ));
}

#[test]
fn threads_are_bounded_by_the_cores_before_the_model_is_read() {
    // `--threads 4294967296` aborted allocating 128 GiB of thread handles; `--threads 100000`
    // could not start its workers. The limit is 8 per core, at most 256.
    let max = EngineOptions::max_threads();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(max, (8 * cores).min(256));
    // Any regular file passes the file check; the thread count is refused before it is parsed.
    let not_a_model = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    for threads in [0, max + 1, 100_000, 1 << 32, usize::MAX] {
        let options = EngineOptions {
            threads: Some(threads),
            ..EngineOptions::default()
        };
        match Engine::load(&not_a_model, &options) {
            Err(e) => assert_eq!(
                e,
                Error::OutOfRange {
                    option: "threads",
                    value: threads,
                    min: 1,
                    max,
                }
            ),
            Ok(_) => panic!("{threads} threads were accepted"),
        }
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nextok-limits-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_model_is_read_only_from_a_regular_file() {
    // Issue #13, point 7: a device file "did not exist".
    assert_eq!(
        check_model_file(Path::new("/dev/null")),
        Err(Error::ModelNotARegularFile {
            path: "/dev/null".into(),
            kind: "a character device",
        })
    );
    let dir = scratch("files");
    // A FIFO would block a reader forever.
    let fifo = dir.join("model.gguf");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert_eq!(
        check_model_file(&fifo),
        Err(Error::ModelNotARegularFile {
            path: fifo.clone(),
            kind: "a FIFO",
        })
    );
    // A symbolic link is followed: one to /dev/zero is a device, not a file.
    let link = dir.join("zero.gguf");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    assert!(matches!(
        check_model_file(&link),
        Err(Error::ModelNotARegularFile {
            kind: "a character device",
            ..
        })
    ));
    assert!(matches!(
        check_model_file(&dir.join("missing.gguf")),
        Err(Error::ModelNotFound { .. })
    ));
    assert!(matches!(
        check_model_file(&dir),
        Err(Error::UnsupportedModelFormat { .. })
    ));
    let file = dir.join("file.gguf");
    std::fs::write(&file, b"GGUF").unwrap();
    assert_eq!(check_model_file(&file), Ok(()));
    // Engine::load applies the same check.
    assert!(matches!(
        Engine::load(&fifo, &EngineOptions::default()),
        Err(Error::ModelNotARegularFile { kind: "a FIFO", .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
