//! Snapdragon chipsets whose Hexagon HTP the QNN backend can compile for, with the SoC model id
//! and HTP architecture QNN needs (without them real models fail to finalize with error 1002).

/// One Snapdragon chipset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chipset {
    /// Qualcomm part number, lower case (`sm8650`).
    pub sm: &'static str,
    /// Marketing name without the "Snapdragon" prefix.
    pub marketing: &'static str,
    /// QNN `soc_model` id.
    pub soc_model: u32,
    /// QNN `htp_arch` (68 = v68, ...).
    pub htp_arch: u32,
}

/// Every chipset the audit knows, oldest first.
pub const CHIPSETS: &[Chipset] = &[
    Chipset {
        sm: "sm8350",
        marketing: "888",
        soc_model: 30,
        htp_arch: 68,
    },
    Chipset {
        sm: "sm8450",
        marketing: "8 Gen 1",
        soc_model: 36,
        htp_arch: 69,
    },
    Chipset {
        sm: "sm8475",
        marketing: "8+ Gen 1",
        soc_model: 42,
        htp_arch: 69,
    },
    Chipset {
        sm: "sm8550",
        marketing: "8 Gen 2",
        soc_model: 43,
        htp_arch: 73,
    },
    Chipset {
        sm: "sm8635",
        marketing: "8s Gen 3",
        soc_model: 68,
        htp_arch: 73,
    },
    Chipset {
        sm: "sm8650",
        marketing: "8 Gen 3",
        soc_model: 57,
        htp_arch: 75,
    },
    Chipset {
        sm: "sm8750",
        marketing: "8 Elite",
        soc_model: 69,
        htp_arch: 79,
    },
    Chipset {
        sm: "sm8735",
        marketing: "8s Gen 4",
        soc_model: 85,
        htp_arch: 79,
    },
    Chipset {
        sm: "sm8850",
        marketing: "8 Elite Gen 5",
        soc_model: 87,
        htp_arch: 81,
    },
];

/// Lower-cases and drops spaces, dashes, underscores and a leading "snapdragon".
fn normalize(text: &str) -> String {
    let s: String = text
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    s.strip_prefix("snapdragon").map(str::to_string).unwrap_or(s)
}

impl Chipset {
    /// Finds a chipset by part number (`sm8650`, `SM8650`) or marketing name (`8 Gen 3`,
    /// `8gen3`, `Snapdragon 8 Gen 3`).
    pub fn find(name: &str) -> Option<Chipset> {
        let wanted = normalize(name);
        CHIPSETS
            .iter()
            .copied()
            .find(|c| c.sm == wanted || normalize(c.marketing) == wanted)
    }

    /// "Snapdragon 8 Gen 3 (SM8650, HTP v75)".
    pub fn describe(&self) -> String {
        format!(
            "Snapdragon {} ({}, HTP v{})",
            self.marketing,
            self.sm.to_uppercase(),
            self.htp_arch
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_to_the_table() {
        assert_eq!(Chipset::find("SM8650").unwrap().soc_model, 57);
        assert_eq!(Chipset::find("8 Gen 3").unwrap().sm, "sm8650");
        assert_eq!(Chipset::find("snapdragon-8-elite").unwrap().htp_arch, 79);
        assert_eq!(Chipset::find("8+gen1").unwrap().soc_model, 42);
        assert_eq!(Chipset::find("8s gen 3").unwrap().sm, "sm8635");
        assert_eq!(Chipset::find("888").unwrap().htp_arch, 68);
        assert!(Chipset::find("8 gen 9").is_none());
    }
}
