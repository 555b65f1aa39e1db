//! The real-world corpus (`conformance/real-world/schemastore`: JSON Schema Store's schemas, each
//! with the instances SchemaStore's own tests hold for it, labels checked by python-jsonschema)
//! through JSON Schema constraints with SmolLM2's vocabulary and tokenizer (issue #17).
//!
//! Floors that only go up: no invalid instance accepted, no mask bit that disagrees with
//! `advance`, at least as many schemas compiled and instances accepted as when the floors were
//! last raised, and no valid instance of a compiled schema refused but the few listed in
//! `KNOWN_VALID_REFUSED` (a list that only shrinks). The refusals are printed by keyword
//! (`--nocapture`), as `nextok constrain-bench --verbose` prints them.
//!
//! The whole corpus runs in a few seconds in a debug build, so nothing is sampled.

mod common;

use std::path::PathBuf;

use nextok_constraints::{ConformanceRun, JsonOptions};

/// Schemas compiled, at least (132 of 341 when the corpus was imported, 180 once unknown
/// keywords became annotations and `not`, `oneOf`, drafts and formats were compiled, 194 once
/// `oneOf` branches were compared through their references and complemented among each
/// other's values, 201 once `allOf` merged two different `$ref`s, 204 once references to
/// other documents of the corpus were bundled from `SchemaResources`, 234 with `uniqueItems` over
/// unbounded string domains as well, 241 with `uniqueItems` over values compared in canonical
/// form, 247 once patterns kept ECMA's meaning and leading look-aheads compiled, 249
/// with `propertyNames` through a `$ref` or a `not` of an `enum`, 250 with `format: iri`). Raise it as the
/// compiler learns more; never lower it.
const COMPILED_FLOOR: usize = 250;
/// Valid instances of compiled schemas accepted, at least (7 of 12 when imported, 12 of 19,
/// then 13 of 20, then 13 of 22; 94 of 148 once the corpus held 322 instances of 229 schemas, 118 of 182 with `$ref`
/// bundling and `uniqueItems` over strings, 119 of 183 with `uniqueItems` over values, 121 of
/// 186 with leading look-aheads).
const VALID_FLOOR: usize = 121;
/// Invalid instances of compiled schemas refused, at least (11 of 11 when imported, 20 of 20
/// with the first 61 instances, 35 of 35 with 322, 42 of 42 once 234 schemas compiled, 47 of 47
/// once 247 did), so the corpus keeps testing refusals.
const INVALID_FLOOR: usize = 47;

/// Valid instances that today's compiler refuses, as (file, test index): remove an entry when it is
/// accepted; add one only for a schema that newly compiles, with its reason. `ava`, `bower`,
/// `jasmine`, `jshintrc`, `mocharc`, `nycrc` and `prettierrc` have more named properties than
/// `JsonOptions::max_free_order_properties` (8), so they are compiled in the schema's property
/// order, and these instances list their keys in another order (`ava` and `jshintrc` compiled once
/// `oneOf` and unknown keywords did; `jasmine` and `prettierrc` once `allOf` of two `$ref`s did:
/// `jasmine`'s instance has `$schema`, not a named property, first, and `prettierrc`'s has
/// `jsxBracketSameLine` between named ones, both accepted once reordered); `stale`'s instance is
/// refused at its second key (not traced further). The other entries, added with the larger corpus
/// of 322 instances, have the same property-order reason, each checked by reordering its keys into
/// the schema's order. `dart-test`, `now` and `taskfile` (compiled once references to other
/// documents were bundled) and `esmrc` (once `uniqueItems` held over strings; its `cjs` object
/// names 9 properties) have the same property-order reason, each checked by reordering.
/// `bootstraprc` and `drupal-routing` (compiled once `uniqueItems` held over strings),
/// `npmpackagejsonlintrc` and `vs-2017.3.host` (once references were bundled) are refused for
/// reasons not traced yet: reordering their keys does not help. `bukkit-plugin` (compiled once
/// leading look-aheads in `pattern` did) names 19 properties and its instance lists `version`
/// before `main`: accepted once its keys are reordered into the schema's order. `pocketmine-plugin`
/// (compiled once `format: iri` was enforced) names 17 properties: its instance too is accepted
/// once reordered. Issue #17 asks for keys in any
/// order and every valid instance accepted.
const KNOWN_VALID_REFUSED: &[(&str, usize)] = &[
    ("appsscript.json", 0),
    ("ava.json", 0),
    ("bamboo-spec.json", 0),
    ("band-manifest.json", 0),
    ("bitrise-step.json", 0),
    ("bitrise.json", 0),
    ("bootstraprc.json", 0),
    ("bower.json", 0),
    ("bower.json", 1),
    ("bowerrc.json", 0),
    ("bukkit-plugin.json", 0),
    ("clang-format.json", 0),
    ("cloudbuild.json", 0),
    ("codeclimate.json", 0),
    ("codeship-steps.json", 0),
    ("coffeelint.json", 0),
    ("component.json", 0),
    ("container-structure-test.json", 0),
    ("csslintrc.json", 0),
    ("dart-test.json", 0),
    ("datalogic-scan2deploy-android.json", 0),
    ("debugsettings.json", 0),
    ("dockerd.json", 0),
    ("drupal-layouts.json", 0),
    ("drupal-links-action.json", 0),
    ("drupal-links-contextual.json", 0),
    ("drupal-links-menu.json", 0),
    ("drupal-links-task.json", 0),
    ("drupal-routing.json", 0),
    ("esmrc.json", 0),
    ("grunt-watch-task.json", 0),
    ("hemtt-0.6.2.json", 0),
    ("huskyrc.json", 0),
    ("jasmine.json", 0),
    ("jshintrc.json", 0),
    ("kong_json_schema.json", 0),
    ("launchsettings.json", 0),
    ("license-report-config.json", 0),
    ("linkinator-config.json", 0),
    ("minecraft-biome.json", 0),
    ("minecraft-dimension-type.json", 0),
    ("minecraft-dimension.json", 0),
    ("mocharc.json", 0),
    ("nest-cli.json", 0),
    ("ninjs-1.3.json", 0),
    ("now.json", 0),
    ("npmpackagejsonlintrc.json", 0),
    ("nycrc.json", 0),
    ("openweather.current.json", 0),
    ("packer.json", 0),
    ("pocketmine-plugin.json", 0),
    ("prettierrc.json", 0),
    ("pterodactyl.json", 0),
    ("qodana-1.0.json", 0),
    ("rustfmt.json", 0),
    ("sourcehut-build-0.65.0.json", 0),
    ("sponge-mixins.json", 0),
    ("sprite.json", 0),
    ("stale.json", 0),
    ("swa-cli.config.json", 0),
    ("taskfile.json", 0),
    ("taurus.json", 1),
    ("typings.json", 0),
    ("typings.json", 1),
    ("vs-2017.3.host.json", 0),
    ("vsix-manifestinjection.json", 0),
];

fn corpus_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../conformance/real-world/schemastore"
    ))
}

#[test]
fn real_world_corpus_floors() {
    let (vocab, tokenize) = common::smollm2_instances();
    // The corpus's schemas refer to each other by SchemaStore URL.
    let resources = ConformanceRun::resources_in_dir(&corpus_dir()).expect("corpus readable");
    assert!(resources.len() >= 341, "{} documents", resources.len());
    let options = JsonOptions::default().with_resources(resources);
    let mut run = ConformanceRun::new(vocab, options, &tokenize);
    let report = run.run_dir(&corpus_dir()).expect("corpus readable");
    for o in &report.outcomes {
        match o.refusal() {
            Some(r) => println!(
                "refused {}: {} at {:?}: {}",
                o.file, r.keyword, r.path, r.reason
            ),
            None => {
                for f in &o.failures {
                    println!("failure {}: {f}", o.file);
                }
            }
        }
    }
    println!("refusals by keyword: {:#?}", report.refusal_table());
    println!(
        "real-world corpus: schemas {} compiled {} refused {}; valid accepted {}/{}; invalid rejected {}/{}; mask mismatches {}",
        report.schemas,
        report.compiled,
        report.unsupported,
        report.valid_accepted,
        report.valid_total,
        report.invalid_rejected,
        report.invalid_total,
        report.mask_mismatches
    );
    assert!(
        report.schemas >= 300,
        "only {} schema files",
        report.schemas
    );
    assert_eq!(
        report.invalid_accepted(),
        0,
        "an invalid instance was accepted by a compiled schema"
    );
    let mut refused_valid = Vec::new();
    for o in report.outcomes.iter().filter(|o| o.compiled.is_ok()) {
        let file = o.file.rsplit('/').next().unwrap_or(&o.file);
        for f in o.failures.iter().filter(|f| f.valid) {
            if !KNOWN_VALID_REFUSED.contains(&(file, f.index)) {
                refused_valid.push(format!("{file} test {}", f.index));
            }
        }
    }
    assert!(
        refused_valid.is_empty(),
        "valid instances of compiled schemas refused: {refused_valid:?}"
    );
    assert!(
        report.valid_total - report.valid_accepted <= KNOWN_VALID_REFUSED.len(),
        "more valid instances refused than the known ones"
    );
    assert_eq!(
        report.mask_mismatches, 0,
        "a mask bit disagreed with advance"
    );
    assert!(
        report.compiled >= COMPILED_FLOOR,
        "only {} schemas compiled",
        report.compiled
    );
    assert!(
        report.valid_accepted >= VALID_FLOOR,
        "only {} valid instances accepted",
        report.valid_accepted
    );
    assert!(
        report.invalid_rejected >= INVALID_FLOOR,
        "only {} invalid instances refused",
        report.invalid_rejected
    );
}
