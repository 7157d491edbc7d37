//! Hand-written excerpts in each format the parser reads, built from lines ONNX Runtime's QNN EP
//! and QNN print (their sources, and a verbose log of onnxruntime 1.31.1 with the QNN plugin
//! 2.7.0); every figure asserted is the one written into the excerpt.

use super::*;

fn one(name: &str, text: &str) -> LogFindings {
    LogFindings::parse(&[(name.to_string(), text.to_string())])
}

/// `adb logcat -v threadtime`: the QNN backend library cannot be loaded, ORT runs everything on
/// the CPU EP.
const THREADTIME: &str = "\
11-23 10:01:02.301  1234  1250 I onnxruntime: [I:onnxruntime:, qnn_provider_factory.cc:253 CreateEpImpl] Creating QNN EP
11-23 10:01:02.302  1234  1250 V onnxruntime: [V:onnxruntime:, qnn_execution_provider.cc:1056 QnnEp] User specified htp_arch: 75
11-23 10:01:02.302  1234  1250 V onnxruntime: [V:onnxruntime:, qnn_execution_provider.cc:1064 QnnEp] User specified soc_model: 57
11-23 10:01:02.345  1234  1250 E onnxruntime: [E:onnxruntime:, qnn_execution_provider.cc:2290 GetCapabilityImpl] QNN SetupBackend failed Unable to load backend, error:  libQnnHtp.so: cannot open shared object file: No such file or directory
11-23 10:01:02.390  1234  1250 V onnxruntime: [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  All nodes placed on [CPUExecutionProvider]. Number of nodes: 212
11-23 10:01:02.391  1234  1250 I onnxruntime: [I:onnxruntime:, inference_session.cc:3296 operator()] Session successfully initialized.
";

#[test]
fn threadtime_logcat_with_a_backend_that_failed_to_load() {
    let f = one("logcat.txt", THREADTIME);
    assert_eq!(f.lines_read, 6);
    assert_eq!(
        f.backend_failure.as_deref(),
        Some("QNN SetupBackend failed Unable to load backend, error: libQnnHtp.so: cannot open shared object file: No such file or directory")
    );
    let fb = &f.fallback;
    assert_eq!(
        (fb.partitions, fb.nodes_total, fb.nodes_on_qnn, fb.nodes_on_cpu),
        (Some(0), Some(212), Some(0), Some(212))
    );
    assert_eq!((f.htp_arch, f.soc_model), (Some(75), Some(57)));
    assert_eq!(
        f.placements,
        vec![Placement {
            ep: "CPUExecutionProvider".into(),
            nodes: 212
        }]
    );
    assert_eq!(
        f.reason().as_deref(),
        Some("QNN took 0 of 212 nodes (the QNN backend failed to load)")
    );
    assert!(f.shows_problem());
    assert!(f
        .evidence
        .iter()
        .any(|e| e.starts_with("logcat.txt:4: QNN SetupBackend failed")));
    assert!(f
        .evidence
        .contains(&"logcat.txt:5: All nodes placed on [CPUExecutionProvider]. Number of nodes: 212".to_string()));
    // device.json says QNN: the log contradicts it.
    let mut f = f;
    let info = DeviceInfo {
        ep: Some("QNNExecutionProvider".into()),
        soc_model: Some("SM8650".into()),
        ..Default::default()
    };
    cross_check(&mut f, &info, None);
    assert_eq!(f.contradictions.len(), 1, "{:?}", f.contradictions);
    assert!(
        f.contradictions[0].starts_with("device.json says ep QNNExecutionProvider, but the QNN backend failed to load")
    );
}

/// `adb logcat -v brief` (with and without the pid): two Gelu refused, the graph cut in three,
/// then QNN fails to finalize with 1002 (QNN's own line twice, its status in hex, ORT's line).
const BRIEF: &str = "\
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:807 GetSupportedNodes] Validation FAILED for 1 nodes in NodeUnit (Gelu) :
I/onnxruntime: \tOperator type: Gelu Node name: /encoder/layers.0/act Node index: 12
I/onnxruntime: \tREASON : QNN EP: Gelu with approximate=tanh is not supported
I/onnxruntime: 
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:807 GetSupportedNodes] Validation FAILED for 1 nodes in NodeUnit (Gelu) :
I/onnxruntime: \tOperator type: Gelu Node name: /encoder/layers.1/act Node index: 31
I/onnxruntime: \tREASON : QNN EP: Gelu with approximate=tanh is not supported
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:807 GetSupportedNodes] Validation PASSED for 1 nodes in NodeUnit (MatMul) :
I/onnxruntime: \tOperator type: MatMul Node name: /encoder/layers.0/q_proj Node index: 3
I/onnxruntime: [I:onnxruntime:, qnn_execution_provider.cc:1152 GetCapability] Number of partitions supported by QNN EP: 2, number of nodes in the graph: 60, number of nodes supported by QNN: 50
I/onnxruntime( 4321): [I:onnxruntime:, qnn_execution_provider.cc:1152 GetCapability] Number of partitions supported by QNN EP: 3, number of nodes in the graph: 60, number of nodes supported by QNN: 58
V/onnxruntime( 4321): [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <E> graph_prepare.cc:217::ERROR:could not create op: q::Softmax
V/onnxruntime( 4321): [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <E> Failed to finalize graph (id: 1) with err 1002
V/onnxruntime( 4321): [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <E> Failed to finalize graph (id: 1) with err 1002
V/onnxruntime( 4321): [V:onnxruntime:, qnn_backend_manager.cc:466 QnnLogging] QnnDsp <I> QnnGraph_finalize done. status 0x3ea
E/onnxruntime: [E:onnxruntime:, qnn_model.cc:387 FinalizeGraphs] Failed to finalize QNN graph. Error code: 1002
E/adsprpc: remote_handle64_open: dynamic loading failed for libQnnHtpV81Skel.so
";

#[test]
fn brief_logcat_with_refused_nodes_partitions_and_a_finalize_error() {
    let f = one("app.log", BRIEF);
    let fb = &f.fallback;
    // The second GetCapability summary counts; the CPU EP has the other 60 - 58 nodes.
    assert_eq!(
        (fb.partitions, fb.nodes_total, fb.nodes_on_qnn, fb.nodes_on_cpu),
        (Some(3), Some(60), Some(58), Some(2))
    );
    assert_eq!(fb.unsupported_count, 2);
    let names: Vec<_> = fb.unsupported_nodes.iter().map(|u| u.node.clone().unwrap()).collect();
    assert_eq!(names, ["/encoder/layers.0/act", "/encoder/layers.1/act"]);
    assert!(fb
        .unsupported_nodes
        .iter()
        .all(|u| u.op_type == "Gelu"
            && u.reason.as_deref() == Some("QNN EP: Gelu with approximate=tanh is not supported")));
    // err 1002 twice, status 0x3ea (= 1002), Error code: 1002: one code, four lines.
    assert_eq!(f.qnn_errors.len(), 1, "{:?}", f.qnn_errors);
    let e = &f.qnn_errors[0];
    assert_eq!(
        (e.code, e.count, e.name.as_str()),
        (1002, 4, "QNN_COMMON_ERROR_MEM_ALLOC")
    );
    assert!(e
        .meaning
        .starts_with("graph finalization failed: memory allocation (1002)"));
    assert_eq!(
        e.line,
        "app.log:13: QnnDsp <E> Failed to finalize graph (id: 1) with err 1002"
    );
    assert_eq!(
        f.reason().as_deref(),
        Some("QNN took 58 of 60 nodes in 3 partitions (QNN error 1002 QNN_COMMON_ERROR_MEM_ALLOC; refused: Gelu ×2)")
    );
    // The repeated QNN line is quoted once.
    let finalize = f.evidence.iter().filter(|l| l.contains("with err 1002")).count();
    assert_eq!(finalize, 1);
    assert!(f
        .evidence
        .iter()
        .any(|l| l.starts_with("app.log:16: Failed to finalize QNN graph. Error code: 1002")));
}

/// ONNX Runtime's own verbose log (stderr of a session, colours included): versions, options and
/// a placement with one QNN partition; `device.json` disagrees with it.
const ORT_VERBOSE: &str = "\
2026-11-23 22:44:32.655267313 [I:onnxruntime:Default, utils.cc:732 LoadPluginOrProviderBridge] Loading EP library: \"/data/app/lib/onnxruntime-qnn-2.7.0/libonnxruntime_providers_qnn.so\" as a plugin
\x1b[0;93m2026-11-23 22:44:32.730496327 [W:onnxruntime:, qnn_execution_provider.cc:933 QnnEp] File mapped weights feature is only available on Windows arm64 devices for QNN API versions >= 2.32. Feature will be disabled by default\x1b[m
2026-11-23 22:44:32.730516126 [V:onnxruntime:, qnn_execution_provider.cc:1056 QnnEp] User specified htp_arch: 75
2026-11-23 22:44:32.730531559 [V:onnxruntime:, qnn_execution_provider.cc:1064 QnnEp] User specified soc_model: 57
2026-11-23 22:44:32.869616921 [I:onnxruntime:, qnn_backend_manager.cc:359 LoadBackend] Found valid interface, version: 2.40.0 backend provider name: HTP_QTI_AISW backend id: 6
2026-11-23 22:44:32.869626776 [V:onnxruntime:, qnn_backend_manager.cc:2154 SetupBackend] Backend build version: v2.51.0.260929181845
ORT Build Info: git-branch=rel-1.31.1, git-commit-id=0123abcd, build type=Release
2026-11-23 22:44:32.894725071 [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [QNNExecutionProvider]. Number of nodes: 1
2026-11-23 22:44:32.894725072 [V:onnxruntime:, session_state.cc:1583 VerifyEachNodeIsAssignedToAnEp]   QNNExecutionProvider_QNN_5600499331747928002_1_0 (QNNExecutionProvider_QNN_5600499331747928002_1_0)
2026-11-23 22:44:32.894725073 [V:onnxruntime:, session_state.cc:1581 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2
";

#[test]
fn ort_verbose_log_versions_placement_and_contradictions() {
    let mut f = one("ort.log", ORT_VERBOSE);
    assert_eq!(f.ort_version.as_deref(), Some("1.31.1"));
    assert_eq!(f.qnn_release.as_deref(), Some("2.7.0"));
    assert_eq!(f.qnn_api_version.as_deref(), Some("2.40.0"));
    assert_eq!(f.qnn_sdk_build.as_deref(), Some("v2.51.0.260929181845"));
    assert_eq!(f.qnn_backend.as_deref(), Some("HTP (HTP_QTI_AISW)"));
    let fb = &f.fallback;
    // One fused QNN node is one partition; the CPU EP's two nodes are the boundary Q/DQ.
    assert_eq!(
        (fb.partitions, fb.nodes_on_cpu, fb.nodes_on_qnn),
        (Some(1), Some(2), None)
    );
    assert!(!f.shows_problem());
    assert_eq!(f.execution_providers, ["QNNExecutionProvider", "CPUExecutionProvider"]);
    assert!(f.qnn_errors.is_empty() && f.backend_failure.is_none());
    // SM8550 is htp_arch 73, soc_model 43; the log's 75/57 are SM8650's.
    let info = DeviceInfo {
        soc_model: Some("SM8550".into()),
        onnxruntime_version: Some("1.22.0".into()),
        qnn_release: Some("2.6.0".into()),
        ep: Some("QNNExecutionProvider".into()),
        ..Default::default()
    };
    cross_check(&mut f, &info, Some("v2.50.40.260831140417"));
    assert_eq!(
        f.contradictions,
        [
            "device.json says onnxruntime_version 1.22.0, the log shows ONNX Runtime 1.31.1",
            "device.json says qnn_release 2.6.0, the log shows the onnxruntime-qnn plugin 2.7.0",
            "device.json says qnn_release 2.6.0 (QNN SDK v2.50.40.260831140417), the log shows QNN SDK build v2.51.0.260929181845",
            "device.json identifies SM8550 (htp_arch 73), but the QNN EP was given htp_arch 75",
            "device.json identifies SM8550 (soc_model 43), but the QNN EP was given soc_model 57",
        ]
    );
    // The same versions written differently agree.
    let agree = DeviceInfo {
        onnxruntime_version: Some("v1.31.1".into()),
        qnn_release: Some("2.7".into()),
        soc_model: Some("SM8650".into()),
        ..Default::default()
    };
    cross_check(&mut f, &agree, Some("v2.51.0.260929181845"));
    assert!(f.contradictions.is_empty(), "{:?}", f.contradictions);
}

#[test]
fn older_qnn_ep_refusals_and_disabled_fallback() {
    let text = "\
[W:onnxruntime:, qnn_execution_provider.cc:210 IsNodeSupported] Erf node `/layer.0/Erf` is not supported: Op type Erf is not supported
[E:onnxruntime:, qnn_execution_provider.cc:640 GetCapability] Unsupported nodes in QNN EP: { name: /layer.0/Erf, type: Erf }{ name: /layer.1/Erf, type: Erf }{ name: /pool/ArgMax, type: ArgMax }, 
[V:onnxruntime:, qnn_execution_provider.cc:402 GetSupportedNodes] Node supported: [0] index: [7] name: [/pool/ArgMax] Operator type: [ArgMax] as part of the NodeUnit type: [ArgMax] index: [7] name: [/pool/ArgMax]
Error: [ONNXRuntimeError] : 1 : FAIL : This session contains graph nodes that are assigned to the default CPU EP, but fallback to CPU EP has been explicitly disabled by the user.
";
    let f = one("stderr", text);
    let fb = &f.fallback;
    assert!(fb.fallback_disabled);
    let got: Vec<(&str, Option<&str>)> = fb
        .unsupported_nodes
        .iter()
        .map(|u| (u.op_type.as_str(), u.node.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("Erf", Some("/layer.0/Erf")),
            ("Erf", Some("/layer.1/Erf")),
            ("ArgMax", Some("/pool/ArgMax"))
        ]
    );
    assert_eq!(fb.unsupported_count, 5);
    assert_eq!(
        f.reason().as_deref(),
        Some("CPU fallback was disabled, so the session was refused; refused: Erf ×2, ArgMax")
    );
}

#[test]
fn codes_are_read_only_from_qnn_lines_and_in_qnn_ranges() {
    assert_eq!(
        qnn_code_in("QnnDsp <E> Failed to finalize graph (id: 1) with err 1002"),
        Some(1002)
    );
    assert_eq!(qnn_code_in("QnnGraph_finalize done. status 0x3ea"), Some(1002));
    assert_eq!(qnn_code_in("QnnGraph_finalize done. status 0x0"), None);
    assert_eq!(
        qnn_code_in("QNN.backendValidateOpConfig() failed, error code 3110"),
        Some(3110)
    );
    assert_eq!(qnn_code_in("Failed to finalize QNN graph (6020)"), Some(6020));
    assert_eq!(
        qnn_code_in("QnnDsp <E> graph_prepare.cc:217::ERROR:could not create op"),
        None
    );
    assert_eq!(qnn_code_in("Conv failed with error code 1002"), None, "not a QNN line");
    assert_eq!(qnn_code_in("qnn err 99999"), None, "outside every QNN range");
    assert_eq!(
        qnn_code_in("QNN status 0xffffffff"),
        None,
        "low 16 bits 65535: no range"
    );
}

#[test]
fn prefixes_are_stripped_and_hostile_lines_are_survived() {
    assert_eq!(message("E/onnxruntime( 1234): [E:onnxruntime:, a.cc:1 F] boom"), "boom");
    assert_eq!(message("11-23 10:01:02.345 E/onnxruntime( 1234): x"), "x");
    assert_eq!(
        message("\x1b[1;31m2026-11-23 22:44:33.362116943 [E:onnxruntime:, q.cc:2 G] y\x1b[m"),
        "y"
    );
    assert_eq!(message("plain text"), "plain text");
    let long = format!("Number of partitions supported by QNN EP: 1{}", "9".repeat(100_000));
    let f = one("x", &long);
    assert_eq!(f.fallback.partitions, None, "a number too large for u64 is not read");
    let junk: String = (0..20_000u32)
        .map(|i| char::from_u32(i % 0x2FFF).unwrap_or('?'))
        .collect();
    let f = one("junk", &junk);
    assert!(f.evidence.len() <= MAX_EVIDENCE);
    assert!(one("", "").reason().is_none());
    // Hundreds of refusals do not push the error out of the evidence.
    let mut many = String::new();
    for i in 0..500 {
        many.push_str(&format!("Conv node `c{i}` is not supported: no\n"));
    }
    many.push_str("Failed to finalize QNN graph. Error code: 6022\n");
    let f = one("m", &many);
    assert_eq!(f.fallback.unsupported_nodes.len(), MAX_UNSUPPORTED);
    assert_eq!(f.fallback.unsupported_count, 500);
    assert!(f.evidence.len() <= MAX_EVIDENCE);
    assert!(f.evidence.iter().any(|l| l.contains("6022")));
}
