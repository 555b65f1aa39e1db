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
            serde_json::json!({"schema": {"type": "array", "uniqueItems": true, "items": {"type": "integer", "maximum": 12}}, "tests": [{"data": [1, 2], "valid": true}]}),
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
        matches!(&report.outcomes[1].compiled, Err(Error::UnsupportedKeyword { keyword, .. }) if keyword == "uniqueItems (integers bounded so that some prefix has finitely many completions)")
    );
    assert!(report.mask_us.median > 0.0 && report.mask_us.max >= report.mask_us.p99);
    assert!(report.compile_ms.max > 0.0);
    // Each outcome names its file; the refusal names its keyword and path, and the table
    // counts it once (issue #17).
    assert!(report.outcomes[1].file.ends_with("b_unsupported.json"));
    let refusal = report.outcomes[1].refusal().expect("refused");
    assert_eq!(
        (refusal.keyword.as_str(), refusal.path.as_str()),
        ("uniqueItems", "#")
    );
    assert!(refusal.reason.contains("uniqueItems"), "{}", refusal.reason);
    assert!(report.outcomes[0].refusal().is_none());
    assert_eq!(
        report.refusal_table().into_iter().collect::<Vec<_>>(),
        [("uniqueItems".to_string(), 1)]
    );
    assert_eq!(report.invalid_accepted(), 0);
}

#[test]
fn failures_carry_their_test_index() {
    // A file whose labels are wrong on purpose: the runner must report each wrong answer with
    // the index of its test, its label and its data.
    let vocab = common::synthetic_vocab();
    let v2 = vocab.clone();
    let tokenize = move |b: &[u8]| v2.greedy_tokenize(b).unwrap();
    let mut run = ConformanceRun::new(vocab, JsonOptions::default(), &tokenize);
    let schema = serde_json::json!({"type": "integer", "minimum": 0});
    let tests = [
        (serde_json::json!(1), true, "fine".to_string()),
        (serde_json::json!(2), false, "labelled invalid".to_string()),
        (serde_json::json!(-3), true, "labelled valid".to_string()),
    ];
    let o = run.run_schema("x", &schema, &tests);
    assert_eq!(o.failures.len(), 2);
    assert_eq!(
        (
            o.failures[0].index,
            o.failures[0].valid,
            o.failures[0].data.as_str()
        ),
        (1, false, "2")
    );
    assert_eq!(
        (
            o.failures[1].index,
            o.failures[1].valid,
            o.failures[1].data.as_str()
        ),
        (2, true, "-3")
    );
    assert!(o.failures[0]
        .to_string()
        .contains("INVALID INSTANCE ACCEPTED"));
    let report = run.report(vec![o]);
    assert_eq!(report.invalid_accepted(), 1);
}

#[test]
fn test_suite_groups_are_numbered() {
    let dir = std::env::temp_dir().join(format!("nextok-groups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("suite.json");
    let groups = serde_json::json!([
        {"description": "a", "schema": {"type": "string"}, "tests": [{"data": "x", "valid": true}]},
        {"description": "b", "schema": {"type": "array", "uniqueItems": true,
                                        "items": {"type": "integer", "maximum": 12}}, "tests": []}
    ]);
    std::fs::write(&file, serde_json::to_vec(&groups).unwrap()).unwrap();
    let vocab = common::synthetic_vocab();
    let v2 = vocab.clone();
    let tokenize = move |b: &[u8]| v2.greedy_tokenize(b).unwrap();
    let mut run = ConformanceRun::new(vocab, JsonOptions::default(), &tokenize);
    let outs = run.run_file(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(outs.iter().map(|o| o.group).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(outs[1].name, "suite.json: b");
    assert_eq!(
        outs[1].refusal().map(|r| r.keyword),
        Some("uniqueItems".into())
    );
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

#[test]
fn the_least_of_runs_is_taken_mask_by_mask() {
    // Two runs of the same schema and instances time the same masks in the same order; the
    // least of them is each mask's least time, and runs of other files are refused.
    let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 8}}});
    let tests = vec![
        (
            serde_json::json!({"n": 12, "s": "abc"}),
            true,
            String::new(),
        ),
        (serde_json::json!({"s": "abcdefghij"}), false, String::new()),
    ];
    let vocab = common::synthetic_vocab();
    let v2 = vocab.clone();
    let tokenize = move |b: &[u8]| v2.greedy_tokenize(b).unwrap();
    let report = |run: &mut ConformanceRun| {
        let outcome = run.run_schema("object", &schema, &tests);
        run.report(vec![outcome])
    };
    let first = report(&mut ConformanceRun::new(
        vocab.clone(),
        JsonOptions::default(),
        &tokenize,
    ));
    let second = report(&mut ConformanceRun::new(
        vocab.clone(),
        JsonOptions::default(),
        &tokenize,
    ));
    assert!(
        first.mask_us_each.len() > 10,
        "{}",
        first.mask_us_each.len()
    );
    assert_eq!(first.mask_us_each.len(), second.mask_us_each.len());
    assert_eq!(first.compile_ms_each.len(), 1);
    // The percentiles of a run are those of its own samples.
    let mut own = first.mask_us_each.clone();
    assert_eq!(nextok_constraints::Percentiles::of(&mut own), first.mask_us);
    let (masks, compiles) = first
        .least_of(&[(second.mask_us_each.clone(), second.compile_ms_each.clone())])
        .unwrap();
    let mut least: Vec<f64> = (first.mask_us_each.iter())
        .zip(&second.mask_us_each)
        .map(|(a, b)| a.min(*b))
        .collect();
    assert_eq!(masks, nextok_constraints::Percentiles::of(&mut least));
    assert!(masks.max <= first.mask_us.max && masks.max <= second.mask_us.max);
    assert_eq!(
        compiles.max,
        first.compile_ms_each[0].min(second.compile_ms_each[0])
    );
    // With no other run, the least is the run itself.
    assert_eq!(
        first.least_of(&[]).unwrap(),
        (first.mask_us, first.compile_ms)
    );
    // A run that timed other masks is refused, naming the counts.
    let err = first
        .least_of(&[(vec![1.0], second.compile_ms_each.clone())])
        .unwrap_err();
    assert!(err.contains("run 2 timed 1 masks"), "{err}");
}
