//! The `npu-audit` binary: everything is in the library ([`npu_audit::cli::main`]); this only
//! ends the process with the exit code it returns.

fn main() {
    std::process::exit(npu_audit::cli::main());
}
