//! The machine the figures are made on: its CPU model and the instruction-set features that
//! select kernels (ONNX Runtime's MLAS and OpenVINO's oneDNN pick int8 kernels by them), so a
//! report can say which host made its numbers.

/// The machine that made the figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct HostInfo {
    /// The CPU's model name as the operating system states it.
    pub cpu: String,
    /// The instruction-set features that select kernels (avx2, avx512f, avx512_vnni, ...).
    pub isa: Vec<String>,
    /// The class of kernels these features select ([`isa_class`]): two hosts of one class run
    /// the same int8 kernels; hosts of two classes may print different figures for the
    /// host-sensitive targets (`docs/hosts.md`).
    #[serde(default)]
    pub isa_class: String,
    /// The operating system (`linux`).
    pub os: String,
    /// The CPU architecture (`x86_64`, `aarch64`).
    pub arch: String,
}

/// The kernel class of a set of features, most capable first: on x86-64 `amx`, `avx512-vnni`,
/// `avx512`, `avx2-vnni`, `avx2`, `sse4`; on Arm `sve`, `i8mm`, `dotprod`, `neon`. ONNX Runtime's
/// MLAS and oneDNN switch int8 kernels at exactly these steps (VNNI's fused u8×s8 dot product,
/// the vpmaddubsw path without it; Arm's SDOT and SMMLA).
pub fn isa_class(arch: &str, isa: &[String]) -> String {
    let has = |f: &str| isa.iter().any(|x| x == f);
    let x86 = [
        ("amx", has("amx_int8")),
        ("avx512-vnni", has("avx512_vnni")),
        ("avx512", has("avx512f") && has("avx512bw")),
        ("avx2-vnni", has("avx_vnni")),
        ("avx2", has("avx2") && has("fma")),
    ];
    let arm = [("sve", has("sve")), ("i8mm", has("i8mm")), ("dotprod", has("asimddp"))];
    let (prefix, steps, floor) = if arch == "aarch64" {
        ("arm64", &arm[..], "neon")
    } else {
        ("x86-64", &x86[..], "sse4")
    };
    let class = steps.iter().find(|(_, on)| *on).map_or(floor, |(name, _)| name);
    format!("{prefix}-{class}")
}

/// Whether a target's figures depend on the host that computes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dependence {
    /// Measured to differ between hosts of two ISA classes (`docs/hosts.md`).
    Measured,
    /// The runtime picks kernels by the host and offers no cap; no difference is measured on the
    /// fixtures, but the mechanism can make one.
    Possible,
    /// The figures do not depend on the host (a simulator of fixed-point hardware, an emulated
    /// CPU model).
    Independent,
}

/// What a target's figures owe to the host: whether they depend on it, on which kernel class they
/// were made (the host's, or the cap the target asked for), and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TargetHost {
    /// Whether the figures depend on the host.
    pub dependence: Dependence,
    /// The kernel class the figures were made on: the host's, or lower when the target caps it.
    pub isa_class: String,
    /// The cap the target asked for (`isa=avx2`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa_cap: Option<String>,
    /// What the dependence comes from, and what the measurements say (`docs/hosts.md`).
    pub why: String,
}

/// The x86-64 kernel classes, least capable first (what an `isa=` cap may name).
pub const X86_CLASSES: &[&str] = &["sse4", "avx2", "avx2-vnni", "avx512", "avx512-vnni", "amx"];

/// The features an x86-64 class needs (beyond those of `sse4`).
fn class_features(class: &str) -> &'static [&'static str] {
    match class {
        "avx2" => &["avx2", "fma"],
        "avx2-vnni" => &["avx2", "fma", "avx_vnni"],
        "avx512" => &["avx512f", "avx512bw"],
        "avx512-vnni" => &["avx512f", "avx512bw", "avx512_vnni"],
        "amx" => &["avx512f", "avx512bw", "avx512_vnni", "amx_int8"],
        _ => &[],
    }
}

/// The class a host's kernels run at when capped to `cap`: the most capable class at or below
/// the cap whose features the host has (oneDNN falls back the same way: AVX-VNNI is not part of
/// AVX-512, so `avx2-vnni` on an AVX-512 host without it runs AVX2 kernels). Not above the host's.
pub fn capped_class(host: &HostInfo, cap: &str) -> String {
    let Some(top) = X86_CLASSES.iter().position(|c| *c == cap) else {
        return host.isa_class.clone();
    };
    let has = |c: &str| class_features(c).iter().all(|f| host.isa.iter().any(|x| x == f));
    let class = X86_CLASSES[..=top].iter().rev().find(|c| has(c)).unwrap_or(&"sse4");
    let capped = format!("x86-64-{class}");
    let rank = |c: &str| X86_CLASSES.iter().position(|x| *x == c.trim_start_matches("x86-64-"));
    match (rank(&capped), rank(&host.isa_class)) {
        (Some(c), Some(h)) if c > h => host.isa_class.clone(),
        _ => capped,
    }
}

/// Instruction-set features that select int8/float kernels, as `/proc/cpuinfo` names them
/// (x86-64 `flags`, Arm `Features`).
const KERNEL_FEATURES: &[&str] = &[
    "sse4_1",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
];

/// This machine, read from `/proc/cpuinfo` (fields unknown elsewhere are left empty).
pub fn this_host() -> HostInfo {
    static HOST: std::sync::OnceLock<HostInfo> = std::sync::OnceLock::new();
    HOST.get_or_init(|| parse(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()))
        .clone()
}

/// The host as a `/proc/cpuinfo` text describes it.
pub fn parse(cpuinfo: &str) -> HostInfo {
    let field = |names: &[&str]| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            names.contains(&k.trim()).then(|| v.trim().to_string())
        })
    };
    let flags = field(&["flags", "Features"]).unwrap_or_default();
    let present: Vec<&str> = flags.split_whitespace().collect();
    let isa: Vec<String> = KERNEL_FEATURES
        .iter()
        .filter(|f| present.contains(f))
        .map(|f| f.to_string())
        .collect();
    let arch = if flags.split_whitespace().any(|f| f == "asimd") {
        "aarch64".to_string()
    } else {
        std::env::consts::ARCH.to_string()
    };
    HostInfo {
        cpu: field(&["model name", "Model name", "cpu model"]).unwrap_or_else(|| "unknown".into()),
        isa_class: isa_class(&arch, &isa),
        isa,
        os: std::env::consts::OS.to_string(),
        arch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_features_are_read_from_the_flags_line() {
        let text =
            "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu sse4_1 avx avx2 avx512f avx512_vnni xsave\n";
        let h = parse(text);
        assert_eq!(h.cpu, "AMD EPYC 9B14");
        assert_eq!(h.isa, vec!["sse4_1", "avx", "avx2", "avx512f", "avx512_vnni"]);
        assert_eq!(h.isa_class, "x86-64-avx512-vnni");
        let arm = parse("processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n");
        assert_eq!(arm.cpu, "unknown");
        assert_eq!(arm.isa, vec!["asimd", "asimddp", "i8mm"]);
        assert_eq!(arm.isa_class, "arm64-i8mm");
    }

    #[test]
    fn the_class_is_the_most_capable_kernel_step() {
        let class = |f: &str| isa_class("x86_64", &f.split_whitespace().map(String::from).collect::<Vec<_>>());
        assert_eq!(class("avx2 fma"), "x86-64-avx2");
        assert_eq!(class("avx2 fma avx_vnni"), "x86-64-avx2-vnni");
        assert_eq!(class("avx2 fma avx512f avx512bw"), "x86-64-avx512");
        assert_eq!(class("avx2 fma avx512f avx512bw avx512_vnni amx_int8"), "x86-64-amx");
        assert_eq!(class("sse4_1"), "x86-64-sse4");
        assert_eq!(
            isa_class("aarch64", &["asimd".into(), "asimddp".into()]),
            "arm64-dotprod"
        );
        assert_eq!(isa_class("aarch64", &["asimd".into()]), "arm64-neon");
        let epyc = parse("model name\t: AMD EPYC\nflags\t\t: avx2 fma avx512f avx512bw avx512_vnni\n");
        assert_eq!(capped_class(&epyc, "avx2"), "x86-64-avx2");
        // AVX-VNNI is not part of AVX-512: capped there, this host runs AVX2 kernels.
        assert_eq!(capped_class(&epyc, "avx2-vnni"), "x86-64-avx2");
        assert_eq!(capped_class(&epyc, "amx"), "x86-64-avx512-vnni");
        let avx2 = parse("flags\t\t: avx2 fma\n");
        assert_eq!(capped_class(&avx2, "avx512"), "x86-64-avx2");
    }
}
