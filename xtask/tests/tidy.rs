//! Tidy: the workspace's invariants, checked rather than only stated (ARCHITECTURE.md,
//! "Invariants").
//!
//! - **The repository stands alone.** No file of the project names a path that leaves the
//!   repository: a user's clone has nothing beside it.
//! - **The arrows that must never exist.** From `cargo metadata` (every feature on, so optional
//!   edges count): the text crates (sampling, stopping, constraints, tokenizer, gguf) never reach
//!   the model, the kernels, the CUDA backend or `cudarc`; only `nextok-cli` depends on clap and no
//!   library reaches it; only `nextok-cuda` depends on `cudarc` and holds CUDA sources.
//! - **Libraries do not spawn processes.** Fetching and building tools is the command's and
//!   xtask's job.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// Every file of the project, walked from the root: what a clone holds (build outputs, git's own
/// folder and the fetched models are not the project's files).
fn project_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.expect("a readable folder entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(
                    name,
                    "target" | ".git" | ".models" | "artifacts" | "coverage"
                ) {
                    walk(&path, out);
                }
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// Whether `file` is this test's own source, which names the forbidden things to look for them.
fn is_self(file: &Path) -> bool {
    file.strip_prefix(root())
        .is_ok_and(|rel| rel == Path::new("xtask/tests/tidy.rs"))
}

/// `path` with `.` and `..` resolved lexically, or `None` when `..` climbs above the first
/// component.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// The nearest folder at or above `file` that holds a `Cargo.toml`: the base that
/// `CARGO_MANIFEST_DIR` names for the code in `file`.
fn manifest_dir(file: &Path) -> PathBuf {
    let mut dir = file.parent().expect("a file has a folder").to_path_buf();
    while !dir.join("Cargo.toml").exists() {
        if !dir.pop() {
            return root();
        }
    }
    dir
}

/// The string literals of `text` that look like relative paths (letters, digits, `._-/` only,
/// with a `/`, or a name given to `.join`), joined in order per statement, where a `..` segment
/// occurs among them:
/// `.join("..").join("name")` and `concat!(env!("CARGO_MANIFEST_DIR"), "/../x")` both become
/// one relative path per statement.
///
/// A `#[path = "..."]` attribute is relative to the folder of the file it is written in, not to
/// the crate: its paths come back with `file_relative` set.
fn relative_paths(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for statement in text.split([';', '{', '}']) {
        let file_relative = statement.contains("#[path");
        let mut joined = String::new();
        let mut rest = statement;
        while let Some(start) = rest.find('"') {
            let joined_name = rest[..start].trim_end().ends_with(".join(");
            let after = &rest[start + 1..];
            let Some(end) = after.find('"') else { break };
            let literal = &after[..end];
            rest = &after[end + 1..];
            let pathlike = !literal.is_empty()
                && literal
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
                && (literal.contains('/') || literal == ".." || joined_name);
            if pathlike {
                if !joined.is_empty() && !joined.ends_with('/') && !literal.starts_with('/') {
                    joined.push('/');
                }
                joined.push_str(literal);
            }
        }
        if joined.split('/').any(|s| s == "..") {
            out.push((joined, file_relative));
        }
    }
    out
}

#[test]
fn the_relative_path_finder_sees_the_forms_that_escaped_before() {
    // The two forms the tests used when the conformance data sat beside the repository.
    // (The folder's name is spelt `beside` here, so that a grep for the team's folder finds no
    // false alarm in this file.)
    let a = r#"let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../beside/conformance");"#;
    let b = "let s = root()\n    .join(\"..\")\n    .join(\"beside\")\n    .join(\"x\");";
    let crate_relative = |p: &str| (p.to_string(), false);
    assert_eq!(
        relative_paths(a),
        [crate_relative("/../../../beside/conformance")]
    );
    assert_eq!(relative_paths(b), [crate_relative("../beside/x")]);
    // Inside the repository: found, and resolved within it.
    let c = r#"PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../conformance");"#;
    assert_eq!(relative_paths(c), [crate_relative("../../conformance")]);
    let d = "#[path = \"../../crates/nextok/src/default_model.rs\"]\nmod default_model;";
    assert_eq!(
        relative_paths(d),
        [("../../crates/nextok/src/default_model.rs".to_string(), true)]
    );
    let crate_dir = root().join("crates").join("nextok");
    assert!(normalise(&crate_dir.join("../../conformance")).is_some_and(|p| p.starts_with(root())));
    assert!(normalise(&crate_dir.join("../../../beside")).is_some_and(|p| !p.starts_with(root())));
}

#[test]
fn no_file_names_a_path_outside_the_repository() {
    let root = root();
    let mut escapes = Vec::new();
    let mut checked = 0;
    for file in project_files() {
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        let in_ci = file.starts_with(root.join(".ci"));
        if !matches!(ext, "rs" | "toml" | "sh" | "md" | "py" | "json") && !in_ci {
            continue;
        }
        // Data files are big and hold no paths of ours.
        if file.starts_with(root.join("conformance")) || file.starts_with(root.join("fuzz/corpus"))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        checked += 1;
        if is_self(&file) {
            continue;
        }
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        // The team's folder beside a checkout, by any spelling: a user's clone has none.
        for (n, line) in text.lines().enumerate() {
            for needle in [
                concat!("..", "/shared"),
                concat!("shared", "/conformance"),
                concat!("shared", "/spec"),
                concat!("shared", "/peers"),
            ] {
                if line.contains(needle) {
                    escapes.push(format!("{shown}:{}: `{needle}`", n + 1));
                }
            }
        }
        // Relative paths in code, resolved against the crate they are written in.
        if ext == "rs" {
            let crate_dir = manifest_dir(&file);
            let file_dir = file.parent().expect("a file has a folder");
            for (rel, file_relative) in relative_paths(&text) {
                let base = if file_relative { file_dir } else { &crate_dir };
                let resolved = normalise(&base.join(rel.trim_start_matches('/')));
                if !resolved.is_some_and(|p| p.starts_with(&root)) {
                    escapes.push(format!("{shown}: `{rel}` leaves the repository"));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} files checked: is the walk broken?"
    );
    assert!(
        escapes.is_empty(),
        "paths outside the repository:\n{}",
        escapes.join("\n")
    );
}

/// The workspace's resolved dependency graph with every feature on: package name -> the names of
/// its normal and build dependencies (dev-dependencies only build tests).
fn dependency_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--all-features"])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in meta["resolve"]["nodes"]
        .as_array()
        .expect("a resolved graph")
    {
        let name = names[node["id"].as_str().unwrap()].to_string();
        let deps: BTreeSet<String> = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| {
                d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].as_str() != Some("dev"))
            })
            .map(|d| names[d["pkg"].as_str().unwrap()].to_string())
            .collect();
        graph.entry(name).or_insert_with(BTreeSet::new).extend(deps);
    }
    graph
}

/// Every package `from` reaches through normal and build dependencies.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(p) = stack.pop() {
        for d in graph.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                stack.push(d.clone());
            }
        }
    }
    seen
}

/// The path from `from` to `to`, for the failure message.
fn path_to(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> String {
    let mut parent: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from.to_string()]);
    while let Some(p) = queue.pop_front() {
        if p == to {
            let mut chain = vec![p.clone()];
            let mut at = p;
            while let Some(up) = parent.get(&at) {
                chain.push(up.clone());
                at = up.clone();
            }
            chain.reverse();
            return chain.join(" -> ");
        }
        for d in graph.get(&p).into_iter().flatten() {
            if d != from && !parent.contains_key(d) {
                parent.insert(d.clone(), p.clone());
                queue.push_back(d.clone());
            }
        }
    }
    String::from("(no path)")
}

#[test]
fn no_forbidden_arrow_in_the_dependency_graph() {
    let graph = dependency_graph();
    let ours: Vec<&String> = graph.keys().filter(|n| n.starts_with("nextok")).collect();
    assert!(
        ours.len() >= 10,
        "expected the nextok crates in the graph, found {ours:?}"
    );
    // The arrows that must exist, so that an empty or misread graph cannot pass.
    assert!(reaches(&graph, "nextok-cli").contains("clap"));
    assert!(reaches(&graph, "nextok").contains("nextok-model"));
    assert!(
        reaches(&graph, "nextok").contains("cudarc"),
        "the `cuda` feature's edge"
    );
    let mut wrong = Vec::new();
    // The text crates know nothing of the model, its arithmetic or the device.
    let text = [
        "nextok-sampling",
        "nextok-stopping",
        "nextok-constraints",
        "nextok-tokenizer",
        "nextok-gguf",
    ];
    let heavy = ["nextok-model", "nextok-kernels", "nextok-cuda", "cudarc"];
    for t in text {
        assert!(graph.contains_key(t), "{t} is not in the workspace");
        let r = reaches(&graph, t);
        for h in heavy {
            if r.contains(h) {
                wrong.push(path_to(&graph, t, h));
            }
        }
    }
    // Only the command depends on clap; no library reaches it.
    for lib in ours.iter().filter(|n| n.as_str() != "nextok-cli") {
        if graph[lib.as_str()].contains("clap") || reaches(&graph, lib).contains("clap") {
            wrong.push(path_to(&graph, lib, "clap"));
        }
    }
    // Only the server, the command and the load generator (an unpublished tool that drives
    // servers over HTTP) run an async runtime or speak HTTP; no library below them does.
    assert!(reaches(&graph, "nextok-server").contains("axum"));
    for lib in ours.iter().filter(|n| {
        !matches!(
            n.as_str(),
            "nextok-cli" | "nextok-server" | "nextok-loadgen"
        )
    }) {
        for web in ["tokio", "axum", "hyper"] {
            if reaches(&graph, lib).contains(web) {
                wrong.push(path_to(&graph, lib, web));
            }
        }
    }
    // Only the CUDA backend talks to CUDA.
    for (name, deps) in &graph {
        if deps.contains("cudarc") && name != "nextok-cuda" {
            wrong.push(format!("{name} -> cudarc"));
        }
    }
    assert!(wrong.is_empty(), "forbidden arrows:\n{}", wrong.join("\n"));
}

#[test]
fn only_the_cuda_crate_holds_cuda_code() {
    let root = root();
    let cuda = root.join("crates").join("nextok-cuda");
    let mut wrong = Vec::new();
    for file in project_files() {
        if file.starts_with(&cuda) {
            continue;
        }
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if matches!(ext, "cu" | "cuh" | "ptx") {
            wrong.push(file.display().to_string());
        }
        if ext == "rs" && !is_self(&file) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text.contains("cudarc::") {
                wrong.push(format!("{} uses cudarc", file.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "CUDA code outside nextok-cuda:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn libraries_do_not_spawn_processes() {
    let root = root();
    let mut wrong = Vec::new();
    for file in project_files() {
        let Ok(rel) = file.strip_prefix(root.join("crates")) else {
            continue;
        };
        let mut parts = rel.components();
        let krate = parts
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .to_string();
        let in_src = parts.next().is_some_and(|c| c.as_os_str() == "src");
        if krate == "nextok-cli" || !in_src || file.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for needle in ["process::Command", "Command::new("] {
            if text.contains(needle) {
                wrong.push(format!("{}: `{needle}`", rel.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "library code that starts processes:\n{}",
        wrong.join("\n")
    );
}
