//! `ConformanceRun` on a MaskBench-format directory: one JSON file per schema with `schema` and
//! `tests: [{data, valid}]`, counted as the CLI's `constrain-bench` reports them.

mod common;

use nextok_constraints::{ConformanceRun, Error, JsonOptions};

#[test]
fn maskbench_directory_counts() {
    let dir = std::env::temp_dir().join(format!("nextok-maskbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        (
            "a_person.json",
            serde_json::json!({
                "schema": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}, "required": ["name"]},
                "tests": [
                    {"data": {"name": "Ann", "age": 3}, "valid": true},
                    {"data": {"age": 3, "name": "Bob"}, "valid": true},
                    {"data": {"name": "Ann", "age": -1}, "valid": false},
                    {"data": {"age": 3}, "valid": false}
                ]
            }),
        ),
        (
            "b_unsupported.json",
            serde_json::json!({"schema": {"type": "array", "uniqueItems": true}, "tests": [{"data": [1, 2], "valid": true}]}),
        ),
        (
            "c_false.json",
            serde_json::json!({"schema": false, "tests": [{"data": 1, "valid": false}]}),
        ),
    ];
    for (name, v) in &files {
        std::fs::write(dir.join(name), serde_json::to_vec(v).unwrap()).unwrap();
    }
    let vocab = common::synthetic_vocab();
    let v2 = vocab.clone();
    let tokenize = move |b: &[u8]| v2.greedy_tokenize(b).unwrap();
    let mut run = ConformanceRun::new(vocab, JsonOptions::default(), &tokenize);
    let report = run.run_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (report.schemas, report.compiled, report.unsupported),
        (3, 2, 1)
    );
    // Instance counts are over the compiled schemas only.
    assert_eq!((report.valid_total, report.valid_accepted), (2, 2));
    assert_eq!((report.invalid_total, report.invalid_rejected), (3, 3));
    assert_eq!(report.mask_mismatches, 0);
    assert!(
        matches!(&report.outcomes[1].compiled, Err(Error::UnsupportedKeyword { keyword, .. }) if keyword == "uniqueItems")
    );
    assert!(report.mask_us.median > 0.0 && report.mask_us.max >= report.mask_us.p99);
    assert!(report.compile_ms.max > 0.0);
}

#[test]
fn missing_directory_is_a_typed_error() {
    let vocab = common::synthetic_vocab();
    let tokenize = |_: &[u8]| Vec::new();
    let mut run = ConformanceRun::new(vocab, JsonOptions::default(), &tokenize);
    assert!(matches!(
        run.run_dir(std::path::Path::new("/nonexistent/nextok")),
        Err(Error::Io { .. })
    ));
}
