//! Inputs the fuzzer once broke the runtime with, repaired as the `parse_fixed` fuzz target
//! repairs them: a model that parses must run, as the fuzz targets check.

#[path = "../fuzz/fuzz_targets/check.rs"]
mod check;

#[test]
fn every_regression_input_is_refused_or_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // Names the input when the check panics.
        eprintln!("{}", path.display());
        check::parses_or_is_refused(&check::repaired(&std::fs::read(&path).unwrap()));
        seen += 1;
    }
    assert!(seen > 0);
}
