//! Which host made the figures (`docs/hosts.md`): the host in every report, read here from
//! `/proc/cpuinfo` independently of the tool; OpenVINO's kernels capped to a class with
//! `isa=<class>` give the figures measured on a host of that class, on any host at or above it;
//! a cap left in the user's shell changes nothing; `merge` and baseline mode refuse reports of
//! another class for the targets whose figures depend on the host, unless `--allow-other-hosts`.

use crate::common;

use common::*;
use serde_json::Value;

const MODEL: &str = "fixtures/models/cnn_qdq_u8.onnx";
const REFERENCE: &str = "fixtures/models/cnn_fp32.onnx";

/// An audit of a target that depends on the host and one that does not.
const CPU_AND_SM8650: [&str; 10] = [
    "compare",
    MODEL,
    "--reference",
    REFERENCE,
    "-t",
    "cpu",
    "-t",
    "qnn:sm8650",
    "--fingerprint",
    "off",
];

/// The kernel class of this machine, by the rule `docs/hosts.md` states.
fn class_from_proc_cpuinfo(flags: &[&str]) -> &'static str {
    let has = |f: &str| flags.contains(&f);
    if has("amx_int8") {
        "x86-64-amx"
    } else if has("avx512_vnni") {
        "x86-64-avx512-vnni"
    } else if has("avx512f") && has("avx512bw") {
        "x86-64-avx512"
    } else if has("avx_vnni") {
        "x86-64-avx2-vnni"
    } else if has("avx2") && has("fma") {
        "x86-64-avx2"
    } else {
        "x86-64-sse4"
    }
}

fn audit(extra: &[&str]) -> Value {
    let mut args = vec![MODEL, "--reference", REFERENCE, "--fingerprint", "off"];
    args.extend_from_slice(extra);
    let (code, report, stderr) = compare_json(&args);
    assert!(matches!(code, 0 | 1), "{stderr}");
    report
}

#[test]
fn the_report_names_this_host_as_proc_cpuinfo_does() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
    let field = |name: &str| {
        cpuinfo
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.trim() == name)
                    .map(|(_, v)| v.trim())
            })
            .expect("field")
    };
    let flags: Vec<&str> = field("flags").split_whitespace().collect();
    let report = audit(&["-t", "cpu", "-t", "qnn:sm8650"]);
    let host = &report["host"];
    assert_eq!(host["cpu"], field("model name"));
    assert_eq!(host["isa_class"], class_from_proc_cpuinfo(&flags));
    let isa: Vec<&str> = host["isa"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for f in [
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx_vnni",
        "amx_int8",
    ] {
        assert_eq!(isa.contains(&f), flags.contains(&f), "{f}");
    }
    assert!(isa.iter().all(|f| flags.contains(f)), "{isa:?}");
    assert_eq!(
        (host["os"].as_str(), host["arch"].as_str()),
        (Some("linux"), Some("x86_64"))
    );
    let dependence = |id: &str| target(&report, id)["host"]["dependence"].as_str().unwrap().to_string();
    assert_eq!(dependence("cpu"), "measured");
    assert_eq!(dependence("cpu:noopt"), "measured");
    assert_eq!(dependence("qnn:sm8650"), "independent");
    assert_eq!(target(&report, "cpu")["host"]["isa_class"], host["isa_class"]);
    let table = run(&[
        "compare",
        MODEL,
        "--reference",
        REFERENCE,
        "-t",
        "cpu",
        "--fingerprint",
        "off",
    ]);
    let text = String::from_utf8_lossy(&table.stdout);
    let class = class_from_proc_cpuinfo(&flags);
    assert!(
        text.lines().any(|l| l.starts_with("host") && l.contains(class)),
        "{text}"
    );
}

/// On a host with AVX-512 VNNI, OpenVINO refuses the u8 CNN ("cannot build the int8 inner
/// product"); on an AVX2-only host (AMD EPYC) it ran it: 35.22 dB logits, 21.19 dB probs. Capped
/// to AVX2, every host at or above AVX2 gives those figures.
#[test]
fn openvino_capped_to_avx2_gives_the_avx2_hosts_figures_and_a_shell_cap_is_ignored() {
    let report = audit(&["-t", "openvino,isa=avx2", "-t", "cpu"]);
    let t = target(&report, "openvino,isa=avx2");
    assert_eq!(t["status"], "ok", "{}", t["error"]);
    assert_eq!(t["host"]["isa_class"], "x86-64-avx2");
    assert_eq!(t["host"]["isa_cap"], "avx2");
    assert_eq!(t["host"]["dependence"], "measured");
    assert_eq!(t["options"]["isa"], "avx2");
    let sqnr = |o: usize| t["outputs"][o]["sqnr_db"].as_f64().unwrap();
    assert!(
        (sqnr(0) - 35.2213).abs() < 5e-4 && (sqnr(1) - 21.1858).abs() < 5e-4,
        "{} {}",
        sqnr(0),
        sqnr(1)
    );

    // The uncapped target's outcome depends on the host; a cap in the shell must change neither
    // it nor the CPU EP's figures.
    let plain = audit(&["-t", "openvino", "-t", "cpu", "--allow-failure", "openvino"]);
    let out = common::bin()
        .current_dir(repo(""))
        .env("ONEDNN_MAX_CPU_ISA", "AVX2")
        .args(["compare", MODEL, "--reference", REFERENCE, "--fingerprint", "off"])
        .args([
            "-t",
            "openvino",
            "-t",
            "cpu",
            "--allow-failure",
            "openvino",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let shell: Value = serde_json::from_slice(&out.stdout).unwrap();
    let figures = |r: &Value, id: &str| {
        let t = target(r, id);
        (t["status"].clone(), t["outputs"].clone())
    };
    for id in ["openvino", "cpu"] {
        assert_eq!(figures(&shell, id), figures(&plain, id), "{id}");
    }
    assert!(shell["notes"].as_array().unwrap().iter().any(|n| n
        .as_str()
        .unwrap()
        .contains("ONEDNN_MAX_CPU_ISA=AVX2 in the environment is not passed")));
}

#[test]
fn an_isa_cap_is_refused_where_no_runtime_can_apply_it() {
    for (spec, says) in [
        ("cpu,isa=avx2", "caps OpenVINO's oneDNN kernels only"),
        ("qnn:sm8650,isa=avx2", "caps OpenVINO's oneDNN kernels only"),
        ("openvino,isa=avx3", "isa=avx3 is not a kernel class"),
    ] {
        let out = run(&["compare", MODEL, "-t", spec]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
        assert!(err.contains(says) && err.lines().count() == 1, "{spec}: {err}");
    }
}

/// `report` as if another host of `class` had made it.
fn made_on(report: &Value, class: &str) -> Value {
    let mut r = report.clone();
    r["host"]["isa_class"] = Value::from(class);
    for t in r["targets"].as_array_mut().unwrap() {
        t["host"]["isa_class"] = Value::from(class);
    }
    r
}

#[test]
fn baseline_mode_and_merge_refuse_another_hosts_class_unless_allowed() {
    let dir = tempdir();
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
        p.display().to_string()
    };
    let here = audit(&["-t", "cpu", "-t", "qnn:sm8650"]);
    let elsewhere = write("elsewhere.json", &made_on(&here, "x86-64-sse4"));
    let args = CPU_AND_SM8650;
    let out = run(&[&args[..], &["--baseline-report", &elsewhere]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cpu was measured on x86-64-sse4"), "{err}");
    assert!(
        !err.contains("qnn:sm8650 was measured"),
        "the simulator does not depend on the host: {err}"
    );
    let out = run(&[
        &args[..],
        &[
            "--baseline-report",
            &elsewhere,
            "--allow-other-hosts",
            "--format",
            "json",
        ],
    ]
    .concat());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("accepted (--allow-other-hosts)")));

    // Two shards, one of them from another class of host.
    let shard = |k: &str| {
        let out = dir.path().join(format!("s{k}.json"));
        let done = run(&[
            &CPU_AND_SM8650[..],
            &["--shard", &format!("{k}/2"), "--out", out.to_str().unwrap()],
        ]
        .concat());
        assert!(
            matches!(done.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        out
    };
    let (one, two) = (shard("1"), shard("2"));
    let moved: Value = serde_json::from_slice(&std::fs::read(&two).unwrap()).unwrap();
    std::fs::write(&two, serde_json::to_vec(&made_on(&moved, "x86-64-avx2")).unwrap()).unwrap();
    let (one, two) = (one.to_str().unwrap(), two.to_str().unwrap());
    let out = run(&["merge", one, two, "--format", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("class x86-64-avx2") && err.contains("--allow-other-hosts"),
        "{err}"
    );
    let out = run(&["merge", one, two, "--allow-other-hosts", "--format", "json"]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
