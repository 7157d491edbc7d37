//! Coverage-guided fuzzing of [`npu_audit::fuzzing::generation_spec`] (its doc says what it reaches).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    npu_audit::fuzzing::generation_spec(data);
});
