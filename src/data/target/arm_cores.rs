//! The Arm cores the ARM64 CPU EP can be emulated on (`cpu-arm64:<core>`), and which of them stand
//! for the CPU cores each chipset ships with. A phone's silent CPU fallback runs ONNX Runtime's
//! aarch64 kernels, which MLAS picks by the features the kernel exposes (dot product, i8mm, SVE
//! and its vector length), so what matters is the instruction-set class the phone's firmware
//! shows, not the core's name: Qualcomm's firmware hides SVE on its Cortex-X2 to X4 phones, and
//! qemu's Cortex-A710 with SVE switched off is that class exactly.

/// One emulated Arm core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArmCore {
    /// The target's variant (`cpu-arm64:<id>`).
    pub id: &'static str,
    /// qemu's `-cpu` value.
    pub qemu_cpu: &'static str,
    /// The class of kernels ONNX Runtime can pick on it: `dotprod`, `i8mm`, `i8mm+sve2-128`,
    /// `i8mm+sve-256`.
    pub isa_class: &'static str,
    /// What it has and which phones' cores it stands for.
    pub description: &'static str,
}

/// Every core a `cpu-arm64` target may emulate; the first of a class is the one triage runs.
pub const ARM_CORES: &[ArmCore] = &[
    ArmCore {
        id: "cortex-a76",
        qemu_cpu: "cortex-a76",
        isa_class: "dotprod",
        description: "Armv8.2 with dot product, no i8mm, no SVE (SM8350-era phones: Cortex-X1, A78)",
    },
    ArmCore {
        id: "neoverse-n1",
        qemu_cpu: "neoverse-n1",
        isa_class: "dotprod",
        description: "Armv8.2 with dot product, no i8mm, no SVE (Cortex-A76's server twin)",
    },
    ArmCore {
        id: "cortex-a710-nosve",
        qemu_cpu: "cortex-a710,sve=off",
        isa_class: "i8mm",
        description: "Armv9 with dot product, i8mm and bf16, SVE hidden: what Snapdragon firmware shows of its Cortex-X2 to X4 and Oryon cores (SM8450 to SM8750)",
    },
    ArmCore {
        id: "cortex-a710",
        qemu_cpu: "cortex-a710",
        isa_class: "i8mm+sve2-128",
        description: "Armv9 with i8mm, bf16 and SVE2 at 128 bits (the same cores where firmware exposes SVE)",
    },
    ArmCore {
        id: "neoverse-n2",
        qemu_cpu: "neoverse-n2",
        isa_class: "i8mm+sve2-128",
        description: "Armv9 with i8mm, bf16 and SVE2 at 128 bits",
    },
    ArmCore {
        id: "neoverse-v1",
        qemu_cpu: "neoverse-v1",
        isa_class: "i8mm+sve-256",
        description: "Armv8.4 with i8mm, bf16 and SVE at 256 bits",
    },
];

/// The core a `cpu-arm64` target without a variant emulates.
pub const DEFAULT_ARM_CORE: &str = "cortex-a710";

/// A core by its id.
pub fn arm_core(id: &str) -> Option<&'static ArmCore> {
    ARM_CORES.iter().find(|c| c.id == id)
}

/// The CPU cores of one chipset and the emulated cores that stand for them, in the order triage
/// tries them (the class its phones show first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChipsetCpus {
    /// The chipset's part number (`sm8650`).
    pub sm: &'static str,
    /// Its CPU cores and what their phones' `/proc/cpuinfo` shows.
    pub cores: &'static str,
    /// The emulated cores (`ARM_CORES` ids).
    pub emulated: &'static [&'static str],
}

/// The cores tried for Arm's Cortex-X2 to X4 generations: the class their phones' firmware shows
/// (SVE hidden) first, then the SVE2 the cores have, which some firmware shows.
const HIDDEN_SVE: &[&str] = &["cortex-a710-nosve", "cortex-a710"];

/// From chipset to CPU cores and the emulated cores that stand for them. Where phones of one
/// chipset were seen both with and without SVE (the firmware decides), both classes are tried.
/// Read off `/proc/cpuinfo` of shipping phones (arm-socs-table): SM8450 without SVE (RedMagic 7)
/// and with it (Galaxy S22 Ultra); SM8550 (Xiaomi 13 Pro), SM8650 (Xiaomi 14) and SM8750 (Galaxy
/// S25+) with dot product, i8mm and bf16 but no SVE; SM8850 (OnePlus 15) with SVE2 and SME.
pub const CHIPSET_CPUS: &[ChipsetCpus] = &[
    ChipsetCpus {
        sm: "sm8350",
        cores: "Cortex-X1, A78, A55: Armv8.2 with dot product",
        emulated: &["cortex-a76"],
    },
    ChipsetCpus {
        sm: "sm8450",
        cores: "Cortex-X2, A710, A510: dot product, i8mm, bf16; SVE2 shown by some phones' firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8475",
        cores: "Cortex-X2, A710, A510: dot product, i8mm, bf16; SVE2 shown by some phones' firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8550",
        cores: "Cortex-X3, A715, A710, A510: dot product, i8mm, bf16; SVE2 hidden by the firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8635",
        cores: "Cortex-X4, A720, A520: dot product, i8mm, bf16; SVE2 hidden by the firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8650",
        cores: "Cortex-X4, A720, A520: dot product, i8mm, bf16; SVE2 hidden by the firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8750",
        cores: "Oryon (2nd generation): dot product, i8mm, bf16; no SVE",
        emulated: &["cortex-a710-nosve"],
    },
    ChipsetCpus {
        sm: "sm8735",
        cores: "Cortex-X4, A720: dot product, i8mm, bf16; SVE2 hidden by the firmware",
        emulated: HIDDEN_SVE,
    },
    ChipsetCpus {
        sm: "sm8850",
        cores: "Oryon (3rd generation): i8mm, bf16, SVE2 (vector length not published), SME",
        emulated: &["cortex-a710", "neoverse-v1"],
    },
];

/// The cores and emulated cores of a chipset by part number.
pub fn chipset_cpus(sm: &str) -> Option<&'static ChipsetCpus> {
    CHIPSET_CPUS.iter().find(|c| c.sm == sm)
}

/// The emulated cores that stand for some chipset's CPU cores, each once, in table order: what
/// triage tries for a report whose chipset it cannot tell.
pub fn every_chipsets_cores() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for c in CHIPSET_CPUS.iter().flat_map(|c| c.emulated.iter()) {
        if !out.contains(c) {
            out.push(c);
        }
    }
    out
}

/// The chipsets whose CPU cores an emulated core stands for (`SM8450, SM8650`).
pub fn chipsets_of(core: &str) -> Vec<&'static str> {
    CHIPSET_CPUS
        .iter()
        .filter(|c| c.emulated.contains(&core))
        .map(|c| c.sm)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chipset_has_its_cores_and_every_core_named_exists() {
        for chip in crate::data::target::CHIPSETS {
            let cpus = chipset_cpus(chip.sm).unwrap_or_else(|| panic!("{} has no CPU cores", chip.sm));
            assert!(!cpus.emulated.is_empty());
            for core in cpus.emulated {
                assert!(arm_core(core).is_some(), "{}: unknown core {core}", chip.sm);
            }
        }
        assert_eq!(CHIPSET_CPUS.len(), crate::data::target::CHIPSETS.len());
        assert!(arm_core(DEFAULT_ARM_CORE).is_some());
    }

    #[test]
    fn the_cores_tried_for_an_unknown_chipset_cover_each_class_shipped() {
        assert_eq!(
            every_chipsets_cores(),
            ["cortex-a76", "cortex-a710-nosve", "cortex-a710", "neoverse-v1"]
        );
        assert_eq!(chipsets_of("cortex-a76"), ["sm8350"]);
        assert!(chipsets_of("neoverse-n2").is_empty());
    }
}
