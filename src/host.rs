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
    pub os: String,
    pub arch: String,
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
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    parse(&cpuinfo)
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
    HostInfo {
        cpu: field(&["model name", "Model name", "cpu model"]).unwrap_or_else(|| "unknown".into()),
        isa: KERNEL_FEATURES
            .iter()
            .filter(|f| present.contains(f))
            .map(|f| f.to_string())
            .collect(),
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
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
        let arm = parse("processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n");
        assert_eq!(arm.cpu, "unknown");
        assert_eq!(arm.isa, vec!["asimd", "asimddp", "i8mm"]);
    }
}
