//! The built `nextok` binary, run as a person would run it: outputs and error paths that need no
//! model file.

use std::process::{Command, Output};

fn nextok(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nextok"))
        .args(args)
        .output()
        .expect("the nextok binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// A person-facing failure: non-zero exit, one line on stderr that starts with `nextok:`, and
/// no panic or backtrace.
fn assert_one_line_error(o: &Output) -> String {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("nextok: "), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    err
}

#[test]
fn sample_prints_the_specifications_table() {
    // Specification, "How the rules combine", worked example T = 2, k = 3, p = 0.9 on the
    // CAT/DOG logits: softmax 0.772 0.211 0.013 0.004; T = 2: 0.580 0.303 0.075 0.043;
    // top-k: 0.605 0.316 0.078 0 (0.605 is the specification's rounding of 0.6058); top-p:
    // 0.657 0.343 0 0.
    let o = nextok(&[
        "sample",
        "--logits",
        "6.2,4.9,2.1,1.0",
        "--temperature",
        "2",
        "--top-k",
        "3",
        "--top-p",
        "0.9",
        "--tokens",
        "CAT,DOG,IS,LOVELY",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows[0], ["stage", "CAT", "DOG", "IS", "LOVELY"]);
    assert_eq!(rows[1], ["logits", "6.2", "4.9", "2.1", "1.0"]);
    assert_eq!(rows[2], ["softmax", "0.772", "0.211", "0.013", "0.004"]);
    assert_eq!(
        rows[3],
        ["temperature, T = 2", "0.580", "0.303", "0.075", "0.043"]
    );
    assert_eq!(rows[4][0], "top-k, k = 3");
    assert_eq!(rows[4][2..], ["0.316", "0.078", "0"]);
    assert_eq!(rows[5], ["top-p, p = 0.9", "0.657", "0.343", "0", "0"]);
}

#[test]
fn sample_json_has_stages_and_final() {
    let o = nextok(&[
        "sample",
        "--logits",
        "6.2,4.9,2.1,1.0",
        "--temperature",
        "2",
        "--top-k",
        "3",
        "--top-p",
        "0.9",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["softmax", "temperature", "top_k", "top_p"]);
    let last: Vec<f64> = v["final"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap())
        .collect();
    // "How the rules combine": CAT 0.657, DOG 0.343, printed to 3 decimals.
    assert!(
        (last[0] - 0.657).abs() < 5e-4 && (last[1] - 0.343).abs() < 5e-4,
        "{last:?}"
    );
    assert_eq!(&last[2..], [0.0, 0.0]);
}

#[test]
fn plan_json_reproduces_the_7b_example() {
    // Specification, "Worked example: a 7-billion-weight model" and "How much memory the cache
    // needs" (Llama 2 7B): 14 GB, 28 ms, 7 ms, 143 tokens/s, 1.43 s, 524,288 bytes/token, 2.15 GB,
    // 68.7 GB.
    let o = nextok(&[
        "plan",
        "--weights",
        "7e9",
        "--bytes-per-weight",
        "2",
        "--layers",
        "32",
        "--d-model",
        "4096",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let f = |k: &str| v[k].as_f64().unwrap();
    assert!((f("weight_bytes") / 1e9 - 14.0).abs() < 0.5);
    assert!((f("time_to_first_token_s") * 1e3 - 28.0).abs() < 0.5);
    assert!((f("time_per_output_token_s") * 1e3 - 7.0).abs() < 0.5);
    assert!((f("tokens_per_second") - 143.0).abs() < 0.5);
    assert!((f("answer_s") - 1.43).abs() < 0.005);
    assert_eq!(f("kv_bytes_per_token"), 524_288.0);
    assert!((f("kv_bytes_per_conversation") / 1e9 - 2.15).abs() < 0.005);
    assert!((f("kv_bytes_all_users") / 1e9 - 68.7).abs() < 0.05);
}

#[test]
fn plan_users_shares_one_read_of_the_weights() {
    // The specification's 7B example on its GPU: a decode step reads the 14 GB of weights once
    // and each of the 32 users' KV caches (1,000 + 200 / 2 positions × 524,288 bytes = 0.577
    // GB each): 32.45 GB in 16.23 ms; 32 users' arithmetic is 0.9 ms, so each user gets 61.62
    // tokens/s and all 32 together 1,972, 14.37 times one user alone (7.29 ms a step).
    // 80 GB leave 66 GB beside the weights: 30 conversations of 4,096 tokens (2.15 GB each).
    let o = nextok(&[
        "plan",
        "--weights",
        "7e9",
        "--bytes-per-weight",
        "2",
        "--layers",
        "32",
        "--d-model",
        "4096",
        "--users",
        "32",
        "--memory",
        "80",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let f = |k: &str| v[k].as_f64().unwrap();
    assert!((f("per_user_tokens_per_second") - 61.6238).abs() < 1e-3);
    assert!((f("aggregate_tokens_per_second") - 1971.96).abs() < 0.01);
    assert!((f("batching_speedup") - 14.3724).abs() < 1e-3);
    assert_eq!(v["batched_decode"]["tokens"], 32);
    assert_eq!(v["batched_decode"]["kv_bytes_read"], 18_454_937_600.0);
    assert_eq!(v["users_that_fit"], 30);
    // The table says the same.
    let o = nextok(&[
        "plan",
        "--weights",
        "7e9",
        "--bytes-per-weight",
        "2",
        "--layers",
        "32",
        "--d-model",
        "4096",
        "--users",
        "32",
        "--memory",
        "80",
    ]);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("tokens per second, all users")
                && l.contains("1,972")
                && l.contains("14.4× one user alone")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("users that fit in 80 GB") && l.ends_with(" 30")),
        "{out}"
    );
    // A memory that is not a positive number is refused in one line.
    let o = nextok(&[
        "plan",
        "--weights",
        "7e9",
        "--layers",
        "32",
        "--d-model",
        "4096",
        "--memory",
        "0",
    ]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("--memory 0"), "{err}");
}

#[test]
fn plan_table_shows_tokens_left_and_pages() {
    // Specification, "The context window: a hard limit" (1,192 tokens left of 8,192 after 7,000)
    // and "How big is a context window?" (8,192 tokens ≈ 6,144 words ≈ 12 pages).
    let o = nextok(&[
        "plan",
        "--weights",
        "65e6",
        "--bytes-per-weight",
        "4",
        "--layers",
        "6",
        "--d-model",
        "512",
        "--kv-bytes",
        "4",
        "--context",
        "8192",
        "--prompt-tokens",
        "7000",
        "--conversation-tokens",
        "1000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row = |label: &str| {
        out.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label} in\n{out}"))
            .to_string()
    };
    assert!(row("tokens left after a 7,000-token prompt").ends_with(" 1,192"));
    assert!(row("context window").contains("6,144 words ≈ 12.3 pages"));
    // "Why inference needs less memory": 260 MB; "How much memory the cache needs": 24,576 bytes,
    // 24.6 MB per 1,000 tokens.
    assert!(row("weights in memory").ends_with(" 260 MB"));
    assert!(row("KV cache per token").contains("24,576 bytes"));
    assert!(row("KV cache, 1,000 tokens").ends_with(" 24.6 MB"));
}

#[test]
fn an_invalid_temperature_is_one_line() {
    let o = nextok(&["sample", "--logits", "1,2", "--temperature", "-1"]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("--temperature"), "{err}");
}

#[test]
fn the_stages_of_other_libraries_are_checked_before_the_model_loads() {
    // Issue #16: each flag is the library's field with dashes, llama.cpp's spellings are
    // aliases, and a bad value is one line naming the flag (before any model is read).
    for (flag, value, named) in [
        ("--typical-p", "0", "--typical-p"),
        ("--mirostat", "3", "--mirostat"),
        ("--dry-base", "0.5", "--dry-base"),
        ("--xtc-probability", "2", "--xtc-probability"),
        ("--dynatemp-exp", "-1", "--dynatemp-exponent"),
        ("--min-tokens-to-keep", "0", "--min-tokens-to-keep"),
    ] {
        let o = nextok(&["generate", "hi", flag, value]);
        let err = assert_one_line_error(&o);
        assert!(err.contains(named), "{flag}: {err}");
    }
}

#[test]
fn a_missing_model_file_is_one_line() {
    let o = nextok(&["plan", "--model", "/no/such/model.gguf"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("/no/such/model.gguf") && err.contains("--model"),
        "{err}"
    );
}

#[test]
fn a_model_folder_is_one_line() {
    let dir = std::env::temp_dir();
    let o = nextok(&["generate", "hi", "--model", dir.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("a folder") && err.contains("GGUF"), "{err}");
}

#[test]
fn a_bad_command_line_is_one_line() {
    let o = nextok(&["sample", "--logits", "1,x"]);
    let err = assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("--logits"), "{err}");
    let o = nextok(&["sample"]);
    assert_one_line_error(&o);
}

/// Every command a person can run, as the README lists them.
const COMMANDS: [&str; 11] = [
    "generate",
    "chat",
    "tokenize",
    "template",
    "logits",
    "score",
    "sample",
    "plan",
    "classify",
    "bench",
    "constrain-bench",
];

#[test]
fn help_names_every_command_in_its_summary_and_its_list() {
    let o = nextok(&["--help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    // The summary is the first line; the list of commands follows "Commands:".
    let summary = out.lines().next().unwrap();
    let (_, list) = out.split_once("Commands:").expect("a list of commands");
    for command in COMMANDS {
        assert!(
            summary.contains(command),
            "{command} missing from the summary: {summary}"
        );
        assert!(
            list.lines()
                .any(|l| l.split_whitespace().next() == Some(command)),
            "{command} missing from the list:\n{list}"
        );
    }
    // The fetch that `cargo xtask fetch-model` runs is not a command for people.
    assert!(!out.contains("fetch-model"), "{out}");
}

#[test]
fn only_commands_that_run_the_model_take_threads_and_device() {
    let flags = |command: &str| {
        let o = nextok(&[command, "--help"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let help = stdout(&o);
        (help.contains("--threads"), help.contains("--device"))
    };
    for command in ["generate", "chat", "logits", "score", "classify", "bench"] {
        assert_eq!(flags(command), (true, true), "{command} runs the model");
    }
    for command in ["tokenize", "template", "constrain-bench", "sample", "plan"] {
        assert_eq!(flags(command), (false, false), "{command} never runs it");
    }
    // Given anyway, the flag is a usage error that names it, before any model is looked for.
    for args in [
        &["tokenize", "x", "--threads", "2"][..],
        &["template", "chat.json", "--device", "cpu"],
        &["constrain-bench", "cases", "--threads", "1"],
    ] {
        let o = nextok(args);
        let err = assert_one_line_error(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--threads") || err.contains("--device"),
            "{err}"
        );
    }
}

#[test]
fn generate_help_documents_the_json_logprob_at_temperature_0() {
    let o = nextok(&["generate", "--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    let json = &help[help.find("--json").expect("--json is documented")..];
    assert!(
        json.contains("at --temperature 0") && json.contains("so logprob is 0"),
        "{json}"
    );
}

/// Runs the binary with NEXTOK_MODEL set as given.
fn nextok_with_model_env(value: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nextok"))
        .args(args)
        .env("NEXTOK_MODEL", value)
        .output()
        .expect("the nextok binary runs")
}

#[test]
fn an_empty_nextok_model_is_one_line_not_the_default() {
    let o = nextok_with_model_env("".as_ref(), &["tokenize", "hi"]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("NEXTOK_MODEL is set but empty"), "{err}");
}

#[test]
fn a_default_model_place_that_is_not_a_file_is_refused() {
    // A folder (or a FIFO, or a device) where the default model should be is neither read nor
    // replaced by a fetch.
    let dir = std::env::temp_dir().join(format!("nextok-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = nextok_with_model_env(dir.as_os_str(), &["tokenize", "hi"]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("is not a regular file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fetch_model_checks_the_digest_of_a_file_already_there() {
    // `cargo xtask fetch-model` runs `nextok fetch-model`: a file in place that is not the
    // default model is reported, with both digests, and not used.
    let file = std::env::temp_dir().join(format!("nextok-digest-{}.gguf", std::process::id()));
    std::fs::write(&file, "abc").unwrap();
    let o = nextok_with_model_env(file.as_os_str(), &["fetch-model"]);
    let err = assert_one_line_error(&o);
    // SHA-256("abc"), FIPS 180-2, appendix B.1; the expected one is the default model's.
    assert!(
        err.contains(
            "has SHA-256 ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        ) && err
            .contains("expected b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        "{err}"
    );
    assert!(stdout(&o).is_empty(), "no path is printed");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn an_unusable_device_is_one_line() {
    // The device is checked before the model file is read, so any existing file will do.
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let o = nextok(&["generate", "--device", "cuda", "--model", manifest, "hi"]);
    let err = assert_one_line_error(&o);
    if !cfg!(feature = "cuda") {
        assert!(
            err.contains("cannot run on cuda:0: this build has no CUDA support"),
            "{err}"
        );
    }
    let o = nextok(&["bench", "--device", "tpu"]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("use cpu, cuda or cuda:N"), "{err}");
}

/// A usage error: exit code 2, one line that names the flag and the value.
fn assert_usage_error(args: &[&str], flag: &str, value: &str) {
    let o = nextok(args);
    let err = assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(flag) && err.contains(&format!("'{value}'")),
        "{args:?} should name {flag} and {value}: {err}"
    );
}

#[test]
fn counts_from_the_issue_are_usage_errors_before_any_allocation() {
    // Issue #13, point 2: each of these aborted ("memory allocation of 137438953472 bytes
    // failed", "capacity overflow"), panicked, grew to 8 GB or wrapped to 0. clap refuses them
    // now, before a model is looked for (NEXTOK_MODEL names nothing, so reaching the model would
    // be a different, exit-code-1 error).
    let huge = ["4294967296", "18446744073709551615"];
    for value in huge {
        assert_usage_error(&["generate", "hi", "--beams", value], "--beams", value);
        assert_usage_error(&["generate", "hi", "-n", value], "--completions", value);
        assert_usage_error(&["generate", "hi", "--threads", value], "--threads", value);
        assert_usage_error(
            &["generate", "hi", "--max-tokens", value],
            "--max-tokens",
            value,
        );
        assert_usage_error(&["bench", "--decode", value], "--decode", value);
    }
    assert_usage_error(
        &["generate", "hi", "--threads", "100000"],
        "--threads",
        "100000",
    );
    assert_usage_error(
        &["generate", "hi", "-n", "100000"],
        "--completions",
        "100000",
    );
    assert_usage_error(
        &[
            "bench",
            "--decode",
            "2",
            "--decode-prompt",
            "18446744073709551615",
        ],
        "--decode-prompt",
        "18446744073709551615",
    );
    assert_usage_error(&["bench", "--prefill", "128,0"], "--prefill", "0");
    assert_usage_error(&["bench", "--repetitions", "0"], "--repetitions", "0");
    assert_usage_error(&["chat", "--threads", "0"], "--threads", "0");
}

#[test]
fn the_limits_are_the_librarys_and_help_states_them() {
    // The command line's ranges are the library's limits, so the two cannot disagree.
    let o = nextok(&["generate", "hi", "-n", "129"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("1..=128"), "{}", stderr(&o));
    assert_eq!(nextok::GenerateOptions::MAX_COMPLETIONS, 128);
    let o = nextok(&["generate", "hi", "--beams", "513"]);
    assert!(stderr(&o).contains("1..=512"), "{}", stderr(&o));
    assert_eq!(nextok::GenerateOptions::MAX_BEAMS, 512);
    let max = nextok::EngineOptions::max_threads();
    let over = (max + 1).to_string();
    let o = nextok(&["generate", "hi", "--threads", &over]);
    assert!(stderr(&o).contains(&format!("1..={max}")), "{}", stderr(&o));
    let help = stdout(&nextok(&["generate", "--help"]));
    assert!(
        help.contains("at most 8 per core, and at most 256"),
        "{help}"
    );
    assert!(help.contains("at most 128"), "{help}");
    assert!(help.contains("at most 512"), "{help}");
}

#[test]
fn plan_heads_are_checked_and_each_blamed_by_name() {
    // Issue #13, point 7: `--heads 0` was accepted and `--kv-heads 0` was blamed on d_model.
    let by_hand = [
        "plan",
        "--weights",
        "7e9",
        "--layers",
        "32",
        "--d-model",
        "4096",
    ];
    fn with<'a>(by_hand: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [by_hand, extra].concat()
    }
    assert_usage_error(
        &with(&by_hand, &["--heads", "0", "--kv-heads", "8"]),
        "--heads",
        "0",
    );
    assert_usage_error(
        &with(&by_hand, &["--heads", "32", "--kv-heads", "0"]),
        "--kv-heads",
        "0",
    );
    let o = nextok(&with(&by_hand, &["--heads", "32", "--kv-heads", "5"]));
    let err = assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains("invalid KV heads 5") && err.contains("a divisor of heads"),
        "{err}"
    );
    let o = nextok(&with(&by_hand, &["--heads", "3", "--kv-heads", "1"]));
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("invalid heads 3") && err.contains("a divisor of d_model"),
        "{err}"
    );
}

#[test]
fn plan_refuses_figures_too_large_to_compute_instead_of_printing_inf() {
    // Issue #13, point 7: huge inputs printed inf and NaN.
    let o = nextok(&[
        "plan",
        "--weights",
        "1e308",
        "--bytes-per-weight",
        "10",
        "--layers",
        "32",
        "--d-model",
        "4096",
    ]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("weight bytes comes to inf"), "{err}");
    assert!(stdout(&o).is_empty(), "no table: {}", stdout(&o));
    let o = nextok(&[
        "plan",
        "--weights",
        "1e300",
        "--layers",
        "32",
        "--d-model",
        "4096",
        "--json",
        "--prompt-tokens",
        "1000000000000",
    ]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("prefill FLOPs comes to inf"), "{err}");
    for flag in ["--bandwidth", "--tflops", "--bytes-per-weight"] {
        let o = nextok(&[
            "plan",
            "--weights",
            "7e9",
            "--layers",
            "32",
            "--d-model",
            "4096",
            flag,
            "NaN",
        ]);
        let err = assert_one_line_error(&o);
        assert!(
            err.contains("NaN") && err.contains("a positive number"),
            "{flag}: {err}"
        );
    }
    assert_usage_error(
        &[
            "plan",
            "--weights",
            "7e9",
            "--layers",
            "32",
            "--d-model",
            "4096",
            "--users",
            "18446744073709551615",
        ],
        "--users",
        "18446744073709551615",
    );
}

#[test]
fn a_device_as_the_model_is_not_a_regular_file() {
    // Issue #13, point 7: `/dev/null` as the model "did not exist".
    let o = nextok(&["generate", "hi", "--model", "/dev/null"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("/dev/null: it is a character device, not a regular file"),
        "{err}"
    );
    let o = nextok(&["plan", "--model", "/dev/zero"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("a character device, not a regular file"),
        "{err}"
    );
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nextok-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfifo(path: &std::path::Path) {
    let made = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success());
}

#[test]
fn constrain_bench_refuses_an_empty_folder() {
    // Issue #13, point 6: an empty folder exited 0 with an all-zero table. The folder is read
    // before the model, so no model is needed to see it refused.
    let dir = scratch("bench-empty");
    let o = nextok(&["constrain-bench", dir.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("holds no .json case files"), "{err}");
    assert!(stdout(&o).is_empty(), "no table: {}", stdout(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn constrain_bench_skips_fifos_and_devices_instead_of_reading_them() {
    // Issue #13, point 6: a FIFO in the folder hung the bench, and a link to /dev/zero read
    // without end. Both are skipped, each with a line that names it; with nothing else in the
    // folder, the bench then has nothing to measure. (A hang would fail this test by timeout.)
    let dir = scratch("bench-fifo");
    mkfifo(&dir.join("a.json"));
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.json")).unwrap();
    let o = nextok(&["constrain-bench", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[0].starts_with("nextok: skipped: ")
            && lines[0].ends_with(
                "a.json: it is a FIFO, not a regular file; give the benchmark case as a file"
            ),
        "{err}"
    );
    assert!(
        lines[1].contains("zero.json: it is a character device, not a regular file"),
        "{err}"
    );
    assert!(lines[2].contains("holds no .json case files"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn schema_and_grammar_files_must_be_regular_files() {
    // Issue #13, "Files": a FIFO or a device as --json-schema or --grammar is refused before it
    // is opened (opening a FIFO blocks) and before the model is loaded.
    let dir = scratch("constraint-files");
    let fifo = dir.join("schema.json");
    mkfifo(&fifo);
    let o = nextok(&["generate", "hi", "--json-schema", fifo.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(
        err.trim_end().ends_with(
            "schema.json: it is a FIFO, not a regular file; give the JSON Schema as a file"
        ),
        "{err}"
    );
    let o = nextok(&["generate", "hi", "--grammar", "/dev/zero"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains(
            "/dev/zero: it is a character device, not a regular file; give the grammar as a file"
        ),
        "{err}"
    );
    let o = nextok(&["template", fifo.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("it is a FIFO, not a regular file"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grammar_file_over_16_mib_is_refused_without_reading_it() {
    // A sparse file: 16 MiB + 1 byte long, but nothing written, so the test is cheap.
    let dir = scratch("big-grammar");
    let big = dir.join("big.gbnf");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((16 << 20) + 1).unwrap();
    drop(f);
    let o = nextok(&["generate", "hi", "--grammar", big.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(
        err.trim_end().ends_with(
            "big.gbnf is 16777217 bytes, more than the 16777216 bytes a grammar file may have"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_named_by_nextok_model_stays_a_fifo() {
    // Issue #13, point 1, the exact input: `mkfifo v; NEXTOK_MODEL=v nextok tokenize hi` turned
    // the FIFO into a 98 MB regular file and exited 0.
    let dir = scratch("fifo-model");
    mkfifo(&dir.join("v"));
    let o = Command::new(env!("CARGO_BIN_EXE_nextok"))
        .args(["tokenize", "hi"])
        .env("NEXTOK_MODEL", "v")
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.contains(
            "v exists but is not a regular file: remove it, or set NEXTOK_MODEL to a GGUF file"
        ),
        "{err}"
    );
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(dir.join("v"))
        .unwrap()
        .file_type();
    assert!(kind.is_fifo(), "{kind:?}");
    // Nothing was fetched beside it.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_default_model_under_dev_is_never_fetched() {
    // A NEXTOK_MODEL that does not exist yet, under /dev: refused before pip runs.
    let o = nextok_with_model_env("/dev/nextok-never.gguf".as_ref(), &["tokenize", "hi"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("/dev/nextok-never.gguf is under /dev, a system folder"),
        "{err}"
    );
    assert!(!std::path::Path::new("/dev/nextok-never.gguf").exists());
}

#[test]
fn a_prompt_from_stdin_is_bounded_and_must_be_text() {
    // Standard input is read whole for `-`: at most 16 MiB, and UTF-8. It is read before the
    // model is looked for (the --model here does not exist, which would be a different error).
    let run = |input: Vec<u8>| {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_nextok"))
            .args(["tokenize", "-", "--model", "/no/such/model.gguf"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // The command stops reading at the limit; a write error past it is expected.
        let _ = stdin.write_all(&input);
        drop(stdin);
        child.wait_with_output().unwrap()
    };
    let o = run(vec![b'a'; (16 << 20) + 1]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("standard input holds more than 16777216 bytes"),
        "{err}"
    );
    let o = run(vec![0xff, 0xfe]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("standard input is not UTF-8 text"), "{err}");
    // Within the limit, the text gets as far as the model.
    let o = run(b"hi".to_vec());
    let err = assert_one_line_error(&o);
    assert!(err.contains("/no/such/model.gguf does not exist"), "{err}");
}

/// Writes `logits` as `dir/logits_<len>.f32`, little-endian, as llama.cpp's sampler harness does.
fn write_logits(dir: &std::path::Path, logits: &[f32]) {
    let bytes: Vec<u8> = logits.iter().flat_map(|z| z.to_le_bytes()).collect();
    std::fs::write(dir.join(format!("logits_{}.f32", logits.len())), bytes).unwrap();
}

#[test]
fn bench_sampler_times_every_chain_at_every_vocabulary() {
    // Issue #16: `nextok bench --sampler DIR --json` times llama.cpp's four chains on the logits
    // files of DIR. Two tiny files, so the run takes milliseconds and needs no model.
    let dir = scratch("sampler-bench");
    let wave = |n: usize| -> Vec<f32> { (0..n).map(|i| ((i * 37) % 101) as f32 / 10.0).collect() };
    write_logits(&dir, &wave(100));
    write_logits(&dir, &wave(1000));
    std::fs::write(dir.join("notes.txt"), "not a logits file").unwrap();
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let chains = v["sampler_us"].as_object().unwrap();
    let mut names: Vec<&str> = chains.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, ["default", "greedy", "min_p", "top_p"]);
    for (chain, by_vocab) in chains {
        let by_vocab = by_vocab.as_object().unwrap();
        let mut vocabs: Vec<&str> = by_vocab.keys().map(String::as_str).collect();
        vocabs.sort();
        assert_eq!(vocabs, ["100", "1000"], "{chain}");
        for (vocab, t) in by_vocab {
            let (min, median, max) = (
                t["min"].as_f64().unwrap(),
                t["median"].as_f64().unwrap(),
                t["max"].as_f64().unwrap(),
            );
            assert!(
                0.0 < min && min <= median && median <= max,
                "{chain} {vocab}: {t}"
            );
        }
    }
    // The table names every chain and vocabulary too.
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    for chain in ["greedy", "default", "top_p", "min_p"] {
        for vocab in ["100", "1000"] {
            assert!(
                table
                    .lines()
                    .any(|l| l.split_whitespace().take(2).eq([chain, vocab])),
                "{chain} {vocab} missing:\n{table}"
            );
        }
    }
}

#[test]
fn bench_sampler_refuses_bad_folders() {
    let dir = scratch("sampler-bench-empty");
    std::fs::write(dir.join("logits.txt"), "no vocabulary in the name").unwrap();
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap(), "--json"]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("holds no logits_<vocab>.f32 file"), "{err}");
    assert!(stdout(&o).is_empty());

    let dir = scratch("sampler-bench-ragged");
    std::fs::write(dir.join("logits_2.f32"), [0u8; 7]).unwrap();
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("is 7 bytes, not a whole number of 4-byte floats"),
        "{err}"
    );

    let dir = scratch("sampler-bench-short");
    std::fs::write(dir.join("logits_3.f32"), [0u8; 8]).unwrap();
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("holds 2 logits, but its name says 3"), "{err}");

    let dir = scratch("sampler-bench-nan");
    write_logits(&dir, &[0.0, f32::NAN, 1.0]);
    let o = nextok(&["bench", "--sampler", dir.to_str().unwrap()]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("logit 1 is NaN"), "{err}");

    let o = nextok(&["bench", "--sampler", "/nonexistent/nextok-logits"]);
    let err = assert_one_line_error(&o);
    assert!(
        err.contains("cannot read /nonexistent/nextok-logits"),
        "{err}"
    );
}
