//! The committed ONNX protobuf types (`src/data/model/onnx.pb.rs`) are what prost-build makes of
//! `proto/onnx.proto` today: building the crate needs no protobuf compiler, and this test is what
//! keeps the two in step. `NPU_AUDIT_REGENERATE=1 cargo test --test it generated_code` rewrites
//! the file after a change of the `.proto` or of prost.

use crate::common::repo;

/// The Rust code prost-build generates from the committed `.proto`.
fn generate() -> String {
    let descriptors = protox::compile([repo("proto/onnx.proto")], [repo("proto")]).expect("compile onnx.proto");
    let out = crate::common::tempdir();
    prost_build::Config::new()
        .out_dir(out.path())
        .compile_fds(descriptors)
        .expect("generate the Rust types");
    std::fs::read_to_string(out.path().join("onnx.rs")).expect("generated onnx.rs")
}

#[test]
fn committed_protobuf_code_is_what_the_generator_makes() {
    let committed_path = repo("src/data/model/onnx.pb.rs");
    let fresh = generate();
    if std::env::var_os("NPU_AUDIT_REGENERATE").is_some() {
        std::fs::write(&committed_path, &fresh).expect("write onnx.pb.rs");
        return;
    }
    let committed = std::fs::read_to_string(&committed_path).expect("src/data/model/onnx.pb.rs");
    assert!(
        committed == fresh,
        "src/data/model/onnx.pb.rs is not what prost-build generates from proto/onnx.proto; \
         run `NPU_AUDIT_REGENERATE=1 cargo test --test it generated_code` and commit the file"
    );
    // The generator really ran on the proto: the types the crate reads are there.
    for ty in [
        "pub struct ModelProto",
        "pub struct GraphProto",
        "pub struct TensorProto",
    ] {
        assert!(fresh.contains(ty), "{ty} missing from the generated code");
    }
}
