//! QNN error codes and what they mean to someone triaging a device.
//!
//! Source of every number and name: the QNN SDK (Qualcomm AI Engine Direct) API headers
//! `QnnCommon.h` (`QnnCommon_Error_t`, `QNN_MIN_ERROR_COMMON` = 1000 plus the offset, and the
//! `QNN_MIN_ERROR_*`/`QNN_MAX_ERROR_*` ranges of every API component) and `QnnGraph.h`
//! (`QnnGraph_Error_t`, `QNN_MIN_ERROR_GRAPH` = 6000 plus the offset; its first three members alias
//! the common 1000, 1002 and 1100), API version 2.x, as vendored by pytorch/executorch
//! (`backends/qualcomm/.../QNN/include/`). A code not in these tables is named by its range only.
//! `QNN_GET_ERROR_CODE` keeps the low 16 bits of a `Qnn_ErrorHandle_t`, so logs print these
//! numbers in decimal or, in QNN's own `status 0x...` lines, in hexadecimal.

/// (code, QNN enum name, meaning).
const CODES: &[(u32, &str, &str)] = &[
    (
        1000,
        "QNN_COMMON_ERROR_NOT_SUPPORTED",
        "an API or feature this backend does not implement",
    ),
    (1002, "QNN_COMMON_ERROR_MEM_ALLOC", "memory allocation"),
    (1003, "QNN_COMMON_ERROR_SYSTEM", "a platform or OS service failed"),
    (1004, "QNN_COMMON_ERROR_INVALID_ARGUMENT", "an invalid argument"),
    (
        1005,
        "QNN_COMMON_ERROR_OPERATION_NOT_PERMITTED",
        "an operation not permitted in this state",
    ),
    (
        1006,
        "QNN_COMMON_ERROR_PLATFORM_NOT_SUPPORTED",
        "QNN does not support this platform",
    ),
    (
        1007,
        "QNN_COMMON_ERROR_SYSTEM_COMMUNICATION",
        "communication with a platform service failed (on Android the DSP, through FastRPC)",
    ),
    (
        1008,
        "QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES",
        "QNN libraries of incompatible versions were loaded together",
    ),
    (
        1009,
        "QNN_COMMON_ERROR_LOADING_BINARIES",
        "a QNN library was already loaded in this process",
    ),
    (
        1010,
        "QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE",
        "a resource could not be allocated",
    ),
    (1100, "QNN_COMMON_ERROR_GENERAL", "an unclassified error"),
    (
        6000,
        "QNN_GRAPH_ERROR_INVALID_ARGUMENT",
        "an argument the backend refuses",
    ),
    (6001, "QNN_GRAPH_ERROR_INVALID_HANDLE", "an invalid graph handle"),
    (
        6002,
        "QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST",
        "no such graph in the backend",
    ),
    (
        6003,
        "QNN_GRAPH_ERROR_INVALID_NAME",
        "an invalid or duplicate graph name",
    ),
    (6004, "QNN_GRAPH_ERROR_INVALID_TENSOR", "an invalid tensor"),
    (
        6005,
        "QNN_GRAPH_ERROR_INVALID_OP_CONFIG",
        "an op configuration the backend refuses (no op package has it, or its tensors differ)",
    ),
    (6006, "QNN_GRAPH_ERROR_SET_PROFILE", "profiling could not be set"),
    (
        6007,
        "QNN_GRAPH_ERROR_UNCONNECTED_NODE",
        "a node added before the nodes it depends on",
    ),
    (
        6020,
        "QNN_GRAPH_ERROR_CREATE_FAILED",
        "the graph could not be created with this configuration",
    ),
    (
        6021,
        "QNN_GRAPH_ERROR_OPTIMIZATION_FAILED",
        "the graph could not be optimized with these ops or this configuration",
    ),
    (6022, "QNN_GRAPH_ERROR_FINALIZE_FAILED", "graph finalization failed"),
    (
        6023,
        "QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED",
        "the graph was executed before it was finalized",
    ),
    (
        6024,
        "QNN_GRAPH_ERROR_GRAPH_FINALIZED",
        "the graph was modified after it was finalized",
    ),
    (
        6025,
        "QNN_GRAPH_ERROR_EXECUTION_ASYNC_FIFO_FULL",
        "the asynchronous execution queue is full",
    ),
    (6030, "QNN_GRAPH_ERROR_SIGNAL_IN_USE", "a control signal already in use"),
    (6031, "QNN_GRAPH_ERROR_ABORTED", "aborted by a signal"),
    (
        6032,
        "QNN_GRAPH_ERROR_PROFILE_IN_USE",
        "a profile handle already bound to another graph",
    ),
    (6033, "QNN_GRAPH_ERROR_TIMED_OUT", "timed out"),
    (
        6034,
        "QNN_GRAPH_ERROR_SUBGRAPH",
        "an operation not permitted on a subgraph",
    ),
    (6035, "QNN_GRAPH_ERROR_DISABLED", "the graph is not enabled"),
];

/// The error-code space of each QNN API component (`QnnCommon.h`).
const RANGES: &[(u32, u32, &str)] = &[
    (1000, 1999, "common"),
    (2000, 2999, "property"),
    (3000, 3999, "op package"),
    (4000, 4999, "backend"),
    (5000, 5999, "context"),
    (6000, 6999, "graph"),
    (7000, 7999, "tensor"),
    (8000, 8999, "memory"),
    (9000, 9999, "signal"),
    (10000, 10999, "error"),
    (11000, 11999, "log"),
    (12000, 12999, "profile"),
    (13000, 13999, "perf infrastructure"),
    (14000, 14999, "device"),
    (30000, 49999, "system"),
    (60000, 60999, "interface"),
];

/// Whether `code` lies in a QNN error range (a number outside them is not read as a QNN code).
pub fn is_qnn_code(code: u32) -> bool {
    RANGES.iter().any(|(lo, hi, _)| (*lo..=*hi).contains(&code))
}

/// The enum name of `code`, or `QNN <component> error` for a code known only by its range.
pub fn name(code: u32) -> String {
    match CODES.iter().find(|(c, _, _)| *c == code) {
        Some((_, n, _)) => (*n).to_string(),
        None => match RANGES.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&code)) {
            Some((_, _, component)) => format!("QNN {component} error"),
            None => "not a QNN error code".to_string(),
        },
    }
}

/// What `code` means, said for support staff; `stage` is what failed when the log says
/// (`graph finalization`, `backend setup`, ...).
pub fn meaning(code: u32, stage: Option<&str>) -> String {
    let what = match CODES.iter().find(|(c, _, _)| *c == code) {
        Some((_, _, m)) => (*m).to_string(),
        None => format!("{} (not in the QNN API headers' tables)", name(code)),
    };
    let head = match stage {
        Some(s) => format!("{s} failed: {what} ({code})"),
        None => format!("{what} ({code})"),
    };
    let hint = match (code, stage) {
        (1002, Some("graph finalization")) => {
            " — often the chipset options (htp_arch, soc_model) were not given or are wrong, or the graph needs more memory than the HTP has; ONNX Runtime then runs the model on the CPU EP"
        }
        (1008, _) => " — the app ships QNN libraries (libQnnHtp, the Skel/Stub for the chip) from different SDK releases",
        (1007, _) => " — the HTP (cDSP) could not be reached: Skel library missing for this chip, or ADSP_LIBRARY_PATH wrong",
        (6005, _) | (3000..=3999, _) => " — an op the HTP refuses in this form; the node falls back or the graph fails",
        _ => "",
    };
    format!("{head}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_headers_numbers() {
        // QNN_MIN_ERROR_COMMON + 2, QNN_MIN_ERROR_GRAPH + 22, + 33 (QnnCommon.h, QnnGraph.h).
        assert_eq!(name(1002), "QNN_COMMON_ERROR_MEM_ALLOC");
        assert_eq!(name(6022), "QNN_GRAPH_ERROR_FINALIZE_FAILED");
        assert_eq!(name(6033), "QNN_GRAPH_ERROR_TIMED_OUT");
        assert_eq!(name(1100), "QNN_COMMON_ERROR_GENERAL");
        // 1001 is not assigned in QnnCommon_Error_t; 3110 is an op package code.
        assert_eq!(name(1001), "QNN common error");
        assert_eq!(name(3110), "QNN op package error");
        assert!(is_qnn_code(60000) && !is_qnn_code(999) && !is_qnn_code(20000));
        let m = meaning(1002, Some("graph finalization"));
        assert!(m.starts_with("graph finalization failed: memory allocation (1002) — often the chipset options"));
    }
}
