//! The JSON-Schema-Test-Suite (draft 2020-12, `shared/conformance/json-schema-test-suite`) run
//! through JSON Schema constraints with SmolLM2's vocabulary: every valid instance of a schema
//! we compile must be accepted token by token with the end allowed at its end, and no invalid
//! instance may be accepted.

mod common;

use std::path::PathBuf;

use nextok_constraints::{ConformanceRun, JsonOptions};

fn suite_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/conformance/json-schema-test-suite/draft2020-12"
    ))
}

#[test]
fn json_schema_test_suite() {
    let vocab = common::smollm2_vocab();
    let v2 = vocab.clone();
    let tokenize = move |b: &[u8]| v2.greedy_tokenize(b).expect("every byte is a token");
    let mut run = ConformanceRun::new(vocab, JsonOptions::default(), &tokenize);
    let report = run.run_dir(&suite_dir()).expect("suite readable");
    let mut unsupported: std::collections::BTreeMap<String, usize> = Default::default();
    for o in &report.outcomes {
        match &o.compiled {
            Err(e) => {
                let key = match e {
                    nextok_constraints::Error::UnsupportedKeyword { keyword, .. } => {
                        keyword.clone()
                    }
                    other => format!("{other}"),
                };
                *unsupported.entry(key).or_default() += 1;
            }
            Ok(()) => {
                for f in &o.failures {
                    println!("{}: {f}", o.name);
                }
            }
        }
    }
    println!("unsupported by reason: {unsupported:#?}");
    println!(
        "JSON-Schema-Test-Suite draft2020-12: schemas {} compiled {} unsupported {}; valid accepted {}/{}; invalid rejected {}/{}; mask mismatches {}",
        report.schemas,
        report.compiled,
        report.unsupported,
        report.valid_accepted,
        report.valid_total,
        report.invalid_rejected,
        report.invalid_total,
        report.mask_mismatches
    );
    println!(
        "mask us {:?}\ncompile ms {:?}",
        report.mask_us, report.compile_ms
    );
    assert_eq!(
        report.mask_mismatches, 0,
        "a mask bit disagreed with advance"
    );
    assert_eq!(
        report.invalid_rejected, report.invalid_total,
        "an invalid instance was accepted by a compiled schema"
    );
    // A floor against regressions in keyword coverage (216 of 383 compiled when written).
    assert!(
        report.compiled >= 180,
        "only {} schemas compiled",
        report.compiled
    );
}
