//! Coverage-guided fuzzing of [`npu_audit::fuzzing::eval_set`] (its doc says what it reaches).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // One scratch directory for every run: the harness empties its set each time.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"));
    npu_audit::fuzzing::eval_set(data, dir.path());
});
